/* The cuDNN engine's plan store without a GPU (lib/cudnn/plan_store.h;
 * meson suite cudnn-construct): the key and the file name, the choice of
 * directory, the file format (round trip, and every kind of damage refused
 * with its reason), lookup (missing, hit, collision, damaged, unreadable)
 * and the atomic write (directories created, modes, no temporary left
 * behind, failures cleaned up, concurrent writers never seen half-written).
 *
 * What needs cuDNN and a GPU — serializing a real plan, restoring it,
 * executing it — is tests/test_cudnn_plan_store_gpu.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudnn_env.h"
#include "fattn_config.h"
#include "cudnn/plan_store.h"
#include "fattn/cudnn.h"
#include "fattn_test.h"

/* ---- helpers ------------------------------------------------------------------ */

static const ps_env base_env = {91900, 1, "NVIDIA H200", 132, 9, 0};
static const char *const base_graph = "route composite\nT uid=0 name=Q dtype=bf16\nOP 0 MATMUL\n";

/* A fresh directory under $TMPDIR (or /tmp); removed by rm_tree. */
static char *temp_dir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/fattn-plan-store-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    ck_assert_msg(d != NULL, "mkdtemp: %s", strerror(errno));
    return strdup(d);
}

static void rm_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        chmod(path, 0700);
        DIR *d = opendir(path);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                    continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
                rm_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Names in dir (excluding . and ..), how many, and whether one looks like a
 * temporary of fattn__ps_write_atomic. */
static int count_entries(const char *dir, int *temporaries)
{
    int n = 0;
    *temporaries = 0;
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "opendir %s", dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        n++;
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || (l > 4 && !strcmp(de->d_name + l - 4, ".tmp")))
            (*temporaries)++;
    }
    closedir(d);
    return n;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "fopen %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_all(const char *path, const void *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "fopen %s", path);
    ck_assert_int_eq(fwrite(b, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Recompute the trailing checksum after a deliberate change, so that the
 * check behind it is the one exercised. */
static void reseal(unsigned char *img, size_t len)
{
    put_le(img + len - 8, fattn__ps_fnv1a64(img, len - 8), 8);
}

static char *path_in(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* ---- key and directory ----------------------------------------------------------- */

typedef struct key_row {
    const char *id;
    void (*change)(ps_env *env, const char **graph);
    bool same; /* the change must leave key and name unchanged */
} key_row;

static void k_none(ps_env *e, const char **g) { (void)e; (void)g; }
static void k_cudnn(ps_env *e, const char **g) { (void)g; e->cudnn_version = 91901; }
static void k_lowering(ps_env *e, const char **g) { (void)g; e->lowering_revision = 2; }
static void k_name(ps_env *e, const char **g) { (void)g; strcpy(e->device_name, "NVIDIA H100 80GB HBM3"); }
static void k_sms(ps_env *e, const char **g) { (void)g; e->sm_count = 114; }
static void k_major(ps_env *e, const char **g) { (void)g; e->cc_major = 10; }
static void k_minor(ps_env *e, const char **g) { (void)g; e->cc_minor = 1; }
static void k_graph(ps_env *e, const char **g)
{
    (void)e;
    *g = "route composite\nT uid=0 name=Q dtype=f16\nOP 0 MATMUL\n";
}

static const key_row key_rows[] = {
    {"cudnn.plan_store.key.same_inputs", k_none, true},
    {"cudnn.plan_store.key.cudnn_version", k_cudnn, false},
    {"cudnn.plan_store.key.lowering_revision", k_lowering, false},
    {"cudnn.plan_store.key.device_name", k_name, false},
    {"cudnn.plan_store.key.sm_count", k_sms, false},
    {"cudnn.plan_store.key.cc_major", k_major, false},
    {"cudnn.plan_store.key.cc_minor", k_minor, false},
    {"cudnn.plan_store.key.graph", k_graph, false},
};

START_TEST(key_changes)
{
    const key_row *r = &key_rows[_i];
    ps_env env = base_env;
    const char *graph = base_graph;
    char *k0 = fattn__ps_key_text(&base_env, base_graph);
    r->change(&env, &graph);
    char *k1 = fattn__ps_key_text(&env, graph);
    ck_assert_ptr_nonnull(k0);
    ck_assert_ptr_nonnull(k1);
    char n0[PS_NAME_LEN], n1[PS_NAME_LEN];
    fattn__ps_file_name(k0, n0);
    fattn__ps_file_name(k1, n1);
    ck_assert_int_eq(strlen(n0), PS_NAME_LEN - 1);
    ck_assert_int_eq(strspn(n0, "0123456789abcdef"), 16);
    ck_assert_str_eq(n0 + 16, ".plan");
    if (r->same) {
        ck_assert_str_eq(k0, k1);
        ck_assert_str_eq(n0, n1);
    } else {
        ck_assert_str_ne(k0, k1);
        ck_assert_str_ne(n0, n1);
    }
    free(k0);
    free(k1);
    fattn_test_mark(r->id);
}
END_TEST

START_TEST(key_text_layout)
{
    char *k = fattn__ps_key_text(&base_env, base_graph);
    const char *head =
        "fattn-cudnn-plan/1\ncudnn=91900 lowering=1\ndevice=NVIDIA H200 sm_count=132 cc=9.0\n";
    ck_assert_uint_eq(PS_FORMAT_VERSION, 1);
    ck_assert_int_eq(strncmp(k, head, strlen(head)), 0);
    ck_assert_str_eq(k + strlen(head), base_graph);
    free(k);
    /* A control character in the device name cannot add a line. */
    ps_env env = base_env;
    strcpy(env.device_name, "evil\ncudnn=1\r");
    k = fattn__ps_key_text(&env, "G");
    ck_assert_str_eq(k, "fattn-cudnn-plan/1\ncudnn=91900 lowering=1\ndevice=evil?cudnn=1? "
                        "sm_count=132 cc=9.0\nG");
    free(k);
    fattn_test_mark("cudnn.plan_store.key.layout");
}
END_TEST

typedef struct dir_row {
    const char *id;
    const char *opt, *env, *want;
} dir_row;

static const dir_row dir_rows[] = {
    {"cudnn.plan_store.dir.none", NULL, NULL, NULL},
    {"cudnn.plan_store.dir.env_empty", NULL, "", NULL},
    {"cudnn.plan_store.dir.env", NULL, "/e", "/e"},
    {"cudnn.plan_store.dir.option", "/o", NULL, "/o"},
    {"cudnn.plan_store.dir.option_wins", "/o", "/e", "/o"},
    {"cudnn.plan_store.dir.option_empty_disables", "", "/e", NULL},
};

START_TEST(dir_choice)
{
    const dir_row *r = &dir_rows[_i];
    const char *got = fattn__ps_resolve_dir(r->opt, r->env);
    if (!r->want)
        ck_assert_ptr_null(got);
    else
        ck_assert_str_eq(got, r->want);
    fattn_test_mark(r->id);
}
END_TEST

/* ---- file format ------------------------------------------------------------------ */

typedef struct rt_row {
    const char *id;
    size_t tag_len, blob_len;
    int64_t workspace;
} rt_row;

static const rt_row rt_rows[] = {
    {"cudnn.plan_store.format.small", 10, 16, 256},
    {"cudnn.plan_store.format.every_byte_value", 10, 256 * 3, 0},
    {"cudnn.plan_store.format.one_byte_plan", 10, 1, 256},
    {"cudnn.plan_store.format.empty_tag", 0, 100, 256},
    {"cudnn.plan_store.format.longest_tag", PS_MAX_TAG_BYTES, 100, 256},
    {"cudnn.plan_store.format.large_plan", 12, (size_t)3 << 20, 603980032},
    {"cudnn.plan_store.format.large_workspace", 12, 64, (int64_t)1 << 40},
};

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 8));
    return b;
}

START_TEST(format_roundtrip)
{
    const rt_row *r = &rt_rows[_i];
    char tag[PS_MAX_TAG_BYTES + 1];
    memset(tag, 'k', sizeof tag);
    memcpy(tag, "eng2_k24=7", r->tag_len < 10 ? r->tag_len : 10);
    unsigned char *blob = pattern(r->blob_len, (unsigned)_i);
    char *key = fattn__ps_key_text(&base_env, base_graph);
    ps_record in = {tag, r->tag_len, key, strlen(key), r->workspace, blob, r->blob_len};
    unsigned char *img = NULL;
    size_t len = 0;
    ck_assert_int_eq(fattn__ps_encode(&in, &img, &len), FATTN_OK);
    ck_assert_uint_eq(len, PS_HEADER_BYTES + PS_TRAILER_BYTES + r->tag_len + strlen(key) +
                               r->blob_len);
    /* The header as documented, byte by byte (little-endian). */
    ck_assert_int_eq(memcmp(img, "FATTNPLN", 8), 0);
    ck_assert_int_eq(img[8], 1);
    ck_assert_int_eq(img[9] | img[10] | img[11], 0);
    ck_assert_int_eq(img[12], (int)(r->tag_len & 0xff));
    ck_assert_int_eq(img[24], (int)(r->workspace & 0xff));
    ps_record out;
    ck_assert_int_eq(fattn__ps_decode(img, len, &out), FATTN_OK);
    ck_assert_uint_eq(out.tag_len, r->tag_len);
    ck_assert_int_eq(memcmp(out.tag, tag, r->tag_len), 0);
    ck_assert_uint_eq(out.key_len, strlen(key));
    ck_assert_int_eq(memcmp(out.key, key, out.key_len), 0);
    ck_assert_int_eq(out.workspace, r->workspace);
    ck_assert_uint_eq(out.blob_len, r->blob_len);
    ck_assert_int_eq(memcmp(out.blob, blob, r->blob_len), 0);
    /* Encoding is a function of the record: same bytes twice. */
    unsigned char *img2 = NULL;
    size_t len2 = 0;
    ck_assert_int_eq(fattn__ps_encode(&in, &img2, &len2), FATTN_OK);
    ck_assert_uint_eq(len2, len);
    ck_assert_int_eq(memcmp(img, img2, len), 0);
    free(img2);
    free(img);
    free(blob);
    free(key);
    fattn_test_mark(r->id);
}
END_TEST

START_TEST(format_encode_refuses)
{
    char tag[PS_MAX_TAG_BYTES + 2];
    memset(tag, 'x', sizeof tag);
    unsigned char blob[4] = {1, 2, 3, 4};
    unsigned char *img = (unsigned char *)1;
    size_t len = 7;
    ps_record too_long_tag = {tag, PS_MAX_TAG_BYTES + 1, "K", 1, 0, blob, 4};
    ck_assert_int_eq(fattn__ps_encode(&too_long_tag, &img, &len), FATTN_E_INVALID_ARG);
    ck_assert_ptr_null(img);
    ck_assert_uint_eq(len, 0);
    ps_record no_key = {"t", 1, "", 0, 0, blob, 4};
    ck_assert_int_eq(fattn__ps_encode(&no_key, &img, &len), FATTN_E_INVALID_ARG);
    ps_record no_blob = {"t", 1, "K", 1, 0, blob, 0};
    ck_assert_int_eq(fattn__ps_encode(&no_blob, &img, &len), FATTN_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "empty plan"));
    /* fattn__ps_store wants the key to be the C string of its length. */
    ps_record bad_key = {"t", 1, "KEY", 2, 0, blob, 4};
    ck_assert_int_eq(fattn__ps_store("/nonexistent-never-created", &bad_key), FATTN_E_INVALID_ARG);
    /* a workspace no device has, and control bytes in the tag (a newline
     * would forge a provenance line, ESC a terminal sequence) */
    ps_record huge_ws = {"t", 1, "K", 1, (int64_t)1 << 62, blob, 4};
    ck_assert_int_eq(fattn__ps_encode(&huge_ws, &img, &len), FATTN_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "workspace"));
    ps_record max_ws = {"t", 1, "K", 1, PS_MAX_WORKSPACE_BYTES, blob, 4};
    ck_assert_int_eq(fattn__ps_encode(&max_ws, &img, &len), FATTN_OK);
    free(img);
    img = NULL;
    ps_record neg_ws = {"t", 1, "K", 1, -1, blob, 4};
    ck_assert_int_eq(fattn__ps_encode(&neg_ws, &img, &len), FATTN_E_INVALID_ARG);
    static const char *const bad_tags[] = {"eng2\nbehavior-neutral: yes", "eng2\x1b[2J", "eng2\x7f",
                                           "eng2\r"};
    for (size_t i = 0; i < sizeof bad_tags / sizeof bad_tags[0]; i++) {
        ps_record ctl = {bad_tags[i], strlen(bad_tags[i]), "K", 1, 0, blob, 4};
        ck_assert_int_eq(fattn__ps_encode(&ctl, &img, &len), FATTN_E_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "control byte"));
    }
    fattn_test_mark("cudnn.plan_store.format.encode_refuses");
}
END_TEST

/* Damage: each row changes a valid image (tag "eng2_k24=7", a short key,
 * a 64-byte plan) and names the words the refusal must contain. */
typedef struct corrupt_row {
    const char *id;
    void (*damage)(unsigned char *img, size_t *len);
    const char *reason;
} corrupt_row;

#define TAG_AT PS_HEADER_BYTES
#define KEY_AT (PS_HEADER_BYTES + 10)
#define BLOB_AT (PS_HEADER_BYTES + 10 + 3)

static void d_empty(unsigned char *b, size_t *n) { (void)b; *n = 0; }
static void d_short(unsigned char *b, size_t *n) { (void)b; *n = PS_HEADER_BYTES + PS_TRAILER_BYTES - 1; }
static void d_cut1(unsigned char *b, size_t *n) { (void)b; *n -= 1; }
static void d_cut_blob(unsigned char *b, size_t *n) { (void)b; *n = BLOB_AT + 20; }
static void d_extra(unsigned char *b, size_t *n) { b[*n] = 0; *n += 1; }
static void d_magic(unsigned char *b, size_t *n) { (void)n; b[0] = 'X'; }
static void d_version2(unsigned char *b, size_t *n) { b[8] = 2; reseal(b, *n); }
static void d_version0(unsigned char *b, size_t *n) { b[8] = 0; reseal(b, *n); }
static void d_reserved(unsigned char *b, size_t *n) { b[21] = 1; reseal(b, *n); }
static void d_blob_bit(unsigned char *b, size_t *n) { (void)n; b[BLOB_AT + 5] ^= 0x10; }
static void d_key_bit(unsigned char *b, size_t *n) { (void)n; b[KEY_AT] ^= 0x01; }
static void d_tag_bit(unsigned char *b, size_t *n) { (void)n; b[TAG_AT + 3] ^= 0x40; }
static void d_sum_bit(unsigned char *b, size_t *n) { b[*n - 1] ^= 0x80; }
static void d_blob_huge(unsigned char *b, size_t *n) { put_le(b + 32, (uint64_t)1 << 63, 8); reseal(b, *n); }
static void d_blob_wrap(unsigned char *b, size_t *n)
{
    /* lengths whose 64-bit sum wraps around to exactly the right total */
    put_le(b + 16, 0xffffffffu, 4);
    put_le(b + 32, (uint64_t)(10 + 3 + 64) - 10 - 0xffffffffu, 8);
    reseal(b, *n);
}
static void d_key_huge(unsigned char *b, size_t *n) { put_le(b + 16, 0xffffffffu, 4); reseal(b, *n); }
static void d_tag_long(unsigned char *b, size_t *n) { put_le(b + 12, 200, 4); reseal(b, *n); }
static void d_nul_key(unsigned char *b, size_t *n) { b[KEY_AT + 1] = 0; reseal(b, *n); }
static void d_neg_ws(unsigned char *b, size_t *n) { put_le(b + 24, (uint64_t)-1, 8); reseal(b, *n); }
static void d_huge_ws(unsigned char *b, size_t *n) { put_le(b + 24, (uint64_t)1 << 62, 8); reseal(b, *n); }
static void d_tag_newline(unsigned char *b, size_t *n) { b[TAG_AT + 4] = '\n'; reseal(b, *n); }
static void d_tag_escape(unsigned char *b, size_t *n) { b[TAG_AT] = 0x1b; reseal(b, *n); }
static void d_no_blob(unsigned char *b, size_t *n)
{
    /* the 64 plan bytes recounted as key: consistent lengths, no plan */
    put_le(b + 16, 3 + 64, 4);
    put_le(b + 32, 0, 8);
    reseal(b, *n);
}

static const corrupt_row corrupt_rows[] = {
    {"cudnn.plan_store.corrupt.empty_file", d_empty, "truncated"},
    {"cudnn.plan_store.corrupt.short_header", d_short, "truncated"},
    {"cudnn.plan_store.corrupt.last_byte_missing", d_cut1, "do not match"},
    {"cudnn.plan_store.corrupt.cut_in_plan", d_cut_blob, "do not match"},
    {"cudnn.plan_store.corrupt.trailing_byte", d_extra, "do not match"},
    {"cudnn.plan_store.corrupt.magic", d_magic, "bad magic"},
    {"cudnn.plan_store.corrupt.newer_format", d_version2, "format version 2"},
    {"cudnn.plan_store.corrupt.format_zero", d_version0, "format version 0"},
    {"cudnn.plan_store.corrupt.reserved", d_reserved, "reserved"},
    {"cudnn.plan_store.corrupt.plan_bit", d_blob_bit, "checksum"},
    {"cudnn.plan_store.corrupt.key_bit", d_key_bit, "checksum"},
    {"cudnn.plan_store.corrupt.tag_bit", d_tag_bit, "checksum"},
    {"cudnn.plan_store.corrupt.checksum_bit", d_sum_bit, "checksum"},
    {"cudnn.plan_store.corrupt.plan_length_huge", d_blob_huge, "do not match"},
    {"cudnn.plan_store.corrupt.lengths_wrap", d_blob_wrap, "do not match"},
    {"cudnn.plan_store.corrupt.key_length_huge", d_key_huge, "do not match"},
    {"cudnn.plan_store.corrupt.tag_length", d_tag_long, "do not match"},
    {"cudnn.plan_store.corrupt.nul_in_key", d_nul_key, "NUL"},
    {"cudnn.plan_store.corrupt.negative_workspace", d_neg_ws, "negative"},
    {"cudnn.plan_store.corrupt.no_plan", d_no_blob, "empty plan"},
    {"cudnn.plan_store.corrupt.workspace_2p62", d_huge_ws, "exceeds"},
    {"cudnn.plan_store.corrupt.tag_newline", d_tag_newline, "control byte 0x0a"},
    {"cudnn.plan_store.corrupt.tag_escape", d_tag_escape, "control byte 0x1b"},
};

START_TEST(format_corrupt)
{
    const corrupt_row *r = &corrupt_rows[_i];
    unsigned char *blob = pattern(64, 3);
    ps_record in = {"eng2_k24=7", 10, "K=1", 3, 256, blob, 64};
    unsigned char *img = NULL;
    size_t len = 0;
    ck_assert_int_eq(fattn__ps_encode(&in, &img, &len), FATTN_OK);
    ck_assert_uint_eq(len, BLOB_AT + 64 + 8);
    /* room for d_extra; the decoder is given only len bytes */
    unsigned char *work = malloc(len + 1);
    memcpy(work, img, len);
    size_t n = len;
    r->damage(work, &n);
    ps_record out;
    fattn_status st = fattn__ps_decode(work, n, &out);
    ck_assert_msg(st == FATTN_E_INVALID_FILE, "%s: status %d", r->id, (int)st);
    ck_assert_msg(strstr(fattn_last_error(), r->reason) != NULL, "%s: message '%s' lacks '%s'",
                  r->id, fattn_last_error(), r->reason);
    free(work);
    free(img);
    free(blob);
    fattn_test_mark(r->id);
}
END_TEST

/* ---- lookup --------------------------------------------------------------------------- */

/* Store one record for the base key into dir; returns the key text. */
static char *store_base(const char *dir, unsigned seed, size_t blob_len)
{
    char *key = fattn__ps_key_text(&base_env, base_graph);
    unsigned char *blob = pattern(blob_len, seed);
    ps_record r = {"eng2_k24=7", 10, key, strlen(key), 256, blob, blob_len};
    ck_assert_int_eq(fattn__ps_store(dir, &r), FATTN_OK);
    free(blob);
    return key;
}

START_TEST(lookup_missing)
{
    char *dir = temp_dir();
    char *key = fattn__ps_key_text(&base_env, base_graph);
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(!l.found);
    ck_assert_ptr_null(l.buf);
    /* a store directory that does not exist yet is just empty */
    char *none = path_in(dir, "not/yet");
    ck_assert_int_eq(fattn__ps_lookup(none, key, &l), FATTN_OK);
    ck_assert(!l.found);
    free(none);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.missing");
}
END_TEST

START_TEST(lookup_hit)
{
    char *dir = temp_dir();
    char *key = store_base(dir, 5, 1000);
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(l.found);
    ck_assert_uint_eq(l.rec.tag_len, 10);
    ck_assert_int_eq(memcmp(l.rec.tag, "eng2_k24=7", 10), 0);
    ck_assert_int_eq(l.rec.workspace, 256);
    unsigned char *want = pattern(1000, 5);
    ck_assert_uint_eq(l.rec.blob_len, 1000);
    ck_assert_int_eq(memcmp(l.rec.blob, want, 1000), 0);
    free(want);
    fattn__ps_loaded_free(&l);
    ck_assert_ptr_null(l.buf);
    fattn__ps_loaded_free(NULL);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.hit");
}
END_TEST

START_TEST(lookup_collision)
{
    /* The file under this key's name holds another key's plan, as a hash
     * collision (or a copied file) would: refused, never used. */
    char *dir = temp_dir();
    char *key = store_base(dir, 1, 100);
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key, name);
    ps_env other = base_env;
    other.sm_count = 114;
    char *other_key = fattn__ps_key_text(&other, base_graph);
    char other_name[PS_NAME_LEN];
    fattn__ps_file_name(other_key, other_name);
    char *from = path_in(dir, name), *to = path_in(dir, other_name);
    ck_assert_int_eq(rename(from, to), 0);
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, other_key, &l), FATTN_E_INVALID_FILE);
    ck_assert(!l.found);
    ck_assert_ptr_null(l.buf);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "another graph or platform"));
    free(from);
    free(to);
    free(other_key);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.collision");
}
END_TEST

START_TEST(lookup_fifo)
{
    /* A FIFO under the plan's name (nobody writing to it) is refused at
     * once: the open must not block waiting for a writer before the file's
     * type is checked. The suite's timeout fails a hang. */
    char *dir = temp_dir();
    char *key = fattn__ps_key_text(&base_env, base_graph);
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key, name);
    char *path = path_in(dir, name);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_FILE);
    ck_assert(!l.found);
    ck_assert_ptr_null(l.buf);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "not a regular file"));
    unlink(path);
    free(path);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.fifo");
}
END_TEST

START_TEST(lookup_damaged)
{
    char *dir = temp_dir();
    char *key = store_base(dir, 2, 300);
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key, name);
    char *path = path_in(dir, name);
    size_t len = 0;
    unsigned char *img = read_all(path, &len);
    img[len - 20] ^= 1;
    write_all(path, img, len);
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_FILE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "checksum"));
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), name)); /* names the file */
    /* truncated by a crash of something other than fattn__ps_write_atomic */
    write_all(path, img, len / 2);
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_FILE);
    /* and a rewrite heals it */
    free(store_base(dir, 2, 300));
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(l.found);
    fattn__ps_loaded_free(&l);
    free(img);
    free(path);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.damaged");
}
END_TEST

START_TEST(lookup_unreadable)
{
    char *dir = temp_dir();
    char *key = fattn__ps_key_text(&base_env, base_graph);
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key, name);
    /* a directory where the file should be */
    char *path = path_in(dir, name);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_FILE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "not a regular file"));
    /* a store "directory" that is a regular file: open fails (ENOTDIR),
     * whoever runs the test */
    char *file = path_in(dir, "plain");
    write_all(file, "x", 1);
    ck_assert_int_eq(fattn__ps_lookup(file, key, &l), FATTN_E_IO);
    ck_assert(!l.found);
    free(file);
    free(path);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.unreadable");
}
END_TEST

/* A store directory others can write to, or owned by another user, is
 * refused for lookup and for writing (its plans are GPU code this process
 * loads; the checks follow ssh's StrictModes). A sticky world-writable
 * directory (as /tmp) is accepted; a plan file in it owned by another user
 * or writable by everyone is not. The ownership rows need root (to chown);
 * as another user they are not run. */
START_TEST(lookup_untrusted_dir)
{
    char *dir = temp_dir();
    char *key = store_base(dir, 3, 40);
    ps_loaded l;
    ck_assert_int_eq(chmod(dir, 0777), 0);
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_ARG);
    ck_assert(!l.found);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "writable by everyone"));
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), dir));
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key, name);
    ck_assert_int_eq(fattn__ps_write_atomic(dir, name, "abc", 3), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(chmod(dir, 01777), 0); /* sticky: as /tmp */
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(l.found);
    fattn__ps_loaded_free(&l);
    ck_assert_int_eq(chmod(dir, 0770), 0); /* a group's shared store */
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    fattn__ps_loaded_free(&l);
    char *path = path_in(dir, name);
    ck_assert_int_eq(chmod(path, 0666), 0);
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_FILE);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "writable by everyone"));
    ck_assert_int_eq(chmod(path, 0600), 0);
    if (geteuid() == 0) {
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_FILE);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "owned by uid 65534"));
        ck_assert_int_eq(chown(path, 0, 0), 0);
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_E_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "owned by uid 65534"));
        ck_assert_int_eq(fattn__ps_write_atomic(dir, name, "abc", 3), FATTN_E_INVALID_ARG);
        ck_assert_int_eq(chown(dir, 0, 0), 0);
    }
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(l.found);
    fattn__ps_loaded_free(&l);
    free(path);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.lookup.untrusted_dir");
}
END_TEST

/* ---- atomic write ---------------------------------------------------------------------- */

START_TEST(write_creates_dirs)
{
    char *dir = temp_dir();
    char *store = path_in(dir, "a/b/plans");
    char *key = store_base(store, 9, 50);
    struct stat sb;
    ck_assert_int_eq(stat(store, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_int_eq(sb.st_mode & 0777, 0700);
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key, name);
    char *path = path_in(store, name);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    int tmps = 0;
    ck_assert_int_eq(count_entries(store, &tmps), 1);
    ck_assert_int_eq(tmps, 0);
    free(path);
    free(key);
    free(store);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.write.creates_dirs");
}
END_TEST

START_TEST(write_replaces)
{
    char *dir = temp_dir();
    free(store_base(dir, 1, 4000));
    char *key = store_base(dir, 2, 10); /* smaller: no stale tail may remain */
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(l.found);
    unsigned char *want = pattern(10, 2);
    ck_assert_uint_eq(l.rec.blob_len, 10);
    ck_assert_int_eq(memcmp(l.rec.blob, want, 10), 0);
    fattn__ps_loaded_free(&l);
    int tmps = 0;
    ck_assert_int_eq(count_entries(dir, &tmps), 1);
    ck_assert_int_eq(tmps, 0);
    free(want);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.write.replaces");
}
END_TEST

START_TEST(write_failures_clean_up)
{
    char *dir = temp_dir();
    /* the store path runs through a regular file */
    char *file = path_in(dir, "plain");
    write_all(file, "x", 1);
    char *below = path_in(file, "plans");
    ck_assert_int_eq(fattn__ps_write_atomic(below, "n.plan", "abc", 3), FATTN_E_IO);
    ck_assert_int_eq(fattn__ps_write_atomic(file, "n.plan", "abc", 3), FATTN_E_IO);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "not a directory"));
    /* rename fails (a non-empty directory holds the name): the written
     * temporary must be removed again */
    char *store = path_in(dir, "store");
    ck_assert_int_eq(mkdir(store, 0700), 0);
    char *blocker = path_in(store, "n.plan");
    ck_assert_int_eq(mkdir(blocker, 0700), 0);
    char *inside = path_in(blocker, "keep");
    write_all(inside, "y", 1);
    ck_assert_int_eq(fattn__ps_write_atomic(store, "n.plan", "abc", 3), FATTN_E_IO);
    ck_assert_ptr_nonnull(strstr(fattn_last_error(), "rename"));
    int tmps = 0;
    ck_assert_int_eq(count_entries(store, &tmps), 1); /* only the blocker */
    ck_assert_int_eq(tmps, 0);
    free(inside);
    free(blocker);
    free(store);
    free(below);
    free(file);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.write.failures_clean_up");
}
END_TEST

/* Writers in several processes replace the same plan file over and over
 * with plans of different sizes while this process reads it: every read
 * sees a whole file of one writer (decodes, key matches, plan is one
 * writer's pattern), never a mixture or a torn tail. */
#define WRITERS 4
#define WRITES_EACH 60

static size_t writer_len(int w, int i) { return (size_t)(200 + 3000 * ((w + i) % 5) + w); }

START_TEST(write_concurrent)
{
    char *dir = temp_dir();
    char *key = fattn__ps_key_text(&base_env, base_graph);
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        pids[w] = fork();
        ck_assert_int_ge(pids[w], 0);
        if (pids[w] == 0) {
            for (int i = 0; i < WRITES_EACH; i++) {
                size_t n = writer_len(w, i);
                unsigned char *blob = malloc(n);
                memset(blob, 'A' + w, n);
                ps_record r = {"eng2_k24=7", 10, key, strlen(key), 256, blob, n};
                if (fattn__ps_store(dir, &r) != FATTN_OK)
                    _exit(1);
                free(blob);
            }
            _exit(0);
        }
    }
    int hits = 0, reads = 0, bad = 0;
    char first_bad[512] = "";
    for (;;) {
        ps_loaded l;
        fattn_status st = fattn__ps_lookup(dir, key, &l);
        reads++;
        if (st != FATTN_OK) {
            if (!bad++)
                snprintf(first_bad, sizeof first_bad, "%s", fattn_last_error());
        } else if (l.found) {
            hits++;
            unsigned char c = l.rec.blob[0];
            bool one_writer = c >= 'A' && c < 'A' + WRITERS;
            for (size_t i = 0; i < l.rec.blob_len && one_writer; i++)
                one_writer = l.rec.blob[i] == c;
            if (!one_writer && !bad++)
                snprintf(first_bad, sizeof first_bad, "plan mixes writers");
            fattn__ps_loaded_free(&l);
        }
        int running = 0;
        for (int w = 0; w < WRITERS; w++) {
            if (!pids[w])
                continue;
            int status = 0;
            pid_t got = waitpid(pids[w], &status, WNOHANG);
            if (got == 0) {
                running++;
                continue;
            }
            ck_assert_msg(got == pids[w] && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                          "writer %d failed", w);
            pids[w] = 0;
        }
        if (!running)
            break;
    }
    ck_assert_msg(bad == 0, "%d of %d reads bad, first: %s", bad, reads, first_bad);
    ck_assert_int_gt(hits, 0);
    /* the final file is complete and one writer's */
    ps_loaded l;
    ck_assert_int_eq(fattn__ps_lookup(dir, key, &l), FATTN_OK);
    ck_assert(l.found);
    fattn__ps_loaded_free(&l);
    int tmps = 0;
    ck_assert_int_eq(count_entries(dir, &tmps), 1);
    ck_assert_int_eq(tmps, 0);
    free(key);
    rm_tree(dir);
    free(dir);
    fattn_test_mark("cudnn.plan_store.write.concurrent");
}
END_TEST

/* ---- suite --------------------------------------------------------------------------- */

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const single_ids[] = {
    "cudnn.plan_store.key.layout",         "cudnn.plan_store.format.encode_refuses",
    "cudnn.plan_store.lookup.missing",     "cudnn.plan_store.lookup.hit",
    "cudnn.plan_store.lookup.collision",   "cudnn.plan_store.lookup.damaged",
    "cudnn.plan_store.lookup.unreadable",  "cudnn.plan_store.write.creates_dirs",
    "cudnn.plan_store.write.replaces",     "cudnn.plan_store.write.failures_clean_up",
    "cudnn.plan_store.write.concurrent",   "cudnn.plan_store.lookup.untrusted_dir",
};

/* The settings the CLI reads from FATTN_CUDNN_* and FATTN_CUDART_LIB: each
 * value a variable takes, the line provenance records (the libraries only
 * when one is named), and a value it does not take refused naming the
 * variable. */
START_TEST(settings_parse)
{
    static const struct {
        const char *at, *bwd, *det, *tag, *dir, *lib, *rt;
        const char *line; /* NULL: refused */
        const char *var;  /* the variable a refusal names */
    } rows[] = {
        {NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         "autotune=off bwd=switch det=direct plan_store=off", NULL},
        {"", "", "", "", "", "", "", "autotune=off bwd=switch det=direct plan_store=off", NULL},
        {"0", NULL, NULL, NULL, "/tmp/p", NULL, NULL,
         "autotune=off bwd=switch det=direct plan_store=on", NULL},
        {"1", "native", NULL, NULL, NULL, NULL, NULL,
         "autotune=on bwd=native det=direct plan_store=off", NULL},
        {"knobs", NULL, "ordered", NULL, NULL, NULL, NULL,
         "autotune=knobs bwd=switch det=ordered plan_store=off", NULL},
        {NULL, NULL, NULL, "eng8_k2=1", NULL, NULL, NULL,
         "autotune=off bwd=switch det=tag:eng8_k2=1 plan_store=off", NULL},
        {NULL, NULL, NULL, NULL, NULL, "/opt/c/lib/libcudnn.so.9", NULL,
         "autotune=off bwd=switch det=direct plan_store=off cudnn_lib=named",
         NULL},
        {NULL, NULL, NULL, NULL, NULL, "/c/libcudnn.so.9", "/r/libcudart.so.12",
         "autotune=off bwd=switch det=direct plan_store=off cudnn_lib=named cudart_lib=named",
         NULL},
        {"yes", NULL, NULL, NULL, NULL, NULL, NULL, NULL, "FATTN_CUDNN_AUTOTUNE"},
        {NULL, "fused", NULL, NULL, NULL, NULL, NULL, NULL, "FATTN_CUDNN_BWD"},
        {NULL, NULL, "direct", NULL, NULL, NULL, NULL, NULL, "FATTN_CUDNN_DET"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fattn_cudnn_settings s;
        fattn_status st = fattn_cudnn_settings_parse(rows[i].at, rows[i].bwd, rows[i].det,
                                                     rows[i].tag, rows[i].dir, rows[i].lib,
                                                     rows[i].rt, &s);
        if (!rows[i].line) {
            ck_assert_int_eq(st, FATTN_E_INVALID_ARG);
            ck_assert_msg(strstr(fattn_last_error(), rows[i].var), "row %zu: %s", i,
                          fattn_last_error());
            continue;
        }
        ck_assert_int_eq(st, FATTN_OK);
        char line[256];
        fattn_cudnn_settings_describe(&s, line, sizeof line);
        ck_assert_str_eq(line, rows[i].line);
    }
    char line[256];
    fattn_cudnn_settings_describe(NULL, line, sizeof line);
    ck_assert_str_eq(line, rows[0].line);
    fattn_test_mark("cudnn.settings.parse");
}
END_TEST

/* The libraries are loaded once per process: once tried, naming another
 * path is refused (the one loaded, or none, is fine). Here the suite has
 * tried already (make_suite asked whether cuDNN loads). */
START_TEST(libraries_once)
{
    (void)fattn_cudnn_library_loadable();
    fattn_cudnn_settings s;
    ck_assert_int_eq(fattn_cudnn_settings_parse(NULL, NULL, NULL, NULL, NULL, NULL, NULL, &s),
                     FATTN_OK);
    ck_assert_int_eq(fattn_cudnn_use_libraries(&s), FATTN_OK);
    ck_assert_int_eq(fattn_cudnn_use_libraries(NULL), FATTN_OK);
    ck_assert_int_eq(fattn_cudnn_settings_parse(NULL, NULL, NULL, NULL, NULL,
                                                "/nonexistent/libcudnn.so.9", NULL, &s),
                     FATTN_OK);
#if FATTN_HAVE_CUDNN
    ck_assert_int_eq(fattn_cudnn_use_libraries(&s), FATTN_E_STATE);
    ck_assert_msg(strstr(fattn_last_error(), "/nonexistent/libcudnn.so.9"), "%s",
                  fattn_last_error());
#else
    ck_assert_int_eq(fattn_cudnn_use_libraries(&s), FATTN_OK); /* nothing to load */
#endif
    fattn_test_mark("cudnn.settings.libraries_once");
}
END_TEST

static void list_ids(void)
{
    for (int i = 0; i < N(key_rows); i++)
        puts(key_rows[i].id);
    for (int i = 0; i < N(dir_rows); i++)
        puts(dir_rows[i].id);
    for (int i = 0; i < N(rt_rows); i++)
        puts(rt_rows[i].id);
    for (int i = 0; i < N(corrupt_rows); i++)
        puts(corrupt_rows[i].id);
    for (int i = 0; i < N(single_ids); i++)
        puts(single_ids[i]);
    puts("cudnn.settings.parse");
    puts("cudnn.settings.libraries_once");
}

static Suite *make_suite(void)
{
    fattn_test_cudnn_libraries();
    Suite *s = suite_create("cudnn-plan-store");
    TCase *tk = tcase_create("key");
    tcase_set_timeout(tk, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tk, key_changes, 0, N(key_rows));
    tcase_add_test(tk, key_text_layout);
    tcase_add_loop_test(tk, dir_choice, 0, N(dir_rows));
    tcase_add_test(tk, settings_parse);
    tcase_add_test(tk, libraries_once);
    suite_add_tcase(s, tk);
    TCase *tf = tcase_create("format");
    tcase_set_timeout(tf, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tf, format_roundtrip, 0, N(rt_rows));
    tcase_add_test(tf, format_encode_refuses);
    tcase_add_loop_test(tf, format_corrupt, 0, N(corrupt_rows));
    suite_add_tcase(s, tf);
    TCase *tl = tcase_create("lookup");
    tcase_set_timeout(tl, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_test(tl, lookup_missing);
    tcase_add_test(tl, lookup_hit);
    tcase_add_test(tl, lookup_collision);
    tcase_add_test(tl, lookup_damaged);
    tcase_add_test(tl, lookup_fifo);
    tcase_add_test(tl, lookup_unreadable);
    tcase_add_test(tl, lookup_untrusted_dir);
    suite_add_tcase(s, tl);
    TCase *tw = tcase_create("write");
    tcase_set_timeout(tw, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(tw, write_creates_dirs);
    tcase_add_test(tw, write_replaces);
    tcase_add_test(tw, write_failures_clean_up);
    tcase_add_test(tw, write_concurrent);
    suite_add_tcase(s, tw);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
