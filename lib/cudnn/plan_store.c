/* The cuDNN engine's on-disk plan store: key, file format, lookup and the
 * atomic write (plan_store.h). Plain C and POSIX; no cuDNN. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cudnn/plan_store.h"

/* ---- small helpers ---------------------------------------------------------- */

uint64_t fattn__ps_fnv1a64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Explicit little-endian fields, so a file means the same on any host. */
static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- key ---------------------------------------------------------------------- */

char *fattn__ps_key_text(const ps_env *env, const char *graph_key)
{
    /* The device name goes into a line of its own kind; a control character
     * in it must not be able to forge another line. */
    char name[sizeof env->device_name];
    size_t n = strnlen(env->device_name, sizeof env->device_name - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)env->device_name[i];
        name[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    name[n] = 0;
    const char *fmt =
        "fattn-cudnn-plan/%u\ncudnn=%lld lowering=%d\ndevice=%s sm_count=%d cc=%d.%d\n%s";
    int len = snprintf(NULL, 0, fmt, PS_FORMAT_VERSION, (long long)env->cudnn_version,
                       env->lowering_revision, name, env->sm_count, env->cc_major, env->cc_minor,
                       graph_key);
    if (len < 0)
        return NULL;
    char *out = malloc((size_t)len + 1);
    if (!out)
        return NULL;
    snprintf(out, (size_t)len + 1, fmt, PS_FORMAT_VERSION, (long long)env->cudnn_version,
             env->lowering_revision, name, env->sm_count, env->cc_major, env->cc_minor, graph_key);
    return out;
}

void fattn__ps_file_name(const char *key_text, char out[PS_NAME_LEN])
{
    snprintf(out, PS_NAME_LEN, "%016llx.plan",
             (unsigned long long)fattn__ps_fnv1a64(key_text, strlen(key_text)));
}

const char *fattn__ps_resolve_dir(const char *opt_dir, const char *env)
{
    const char *d = opt_dir ? opt_dir : env;
    return d && *d ? d : NULL;
}

/* ---- file format ---------------------------------------------------------------- */

/* The first control byte (below 0x20, or DEL) of n bytes, or -1: a tag is
 * printed in provenance and progress lines, where a newline or an escape
 * sequence would forge or hide text. */
static long control_byte_at(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] == 0x7f)
            return (long)i;
    return -1;
}

fattn_status fattn__ps_encode(const ps_record *r, unsigned char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (r->tag_len > PS_MAX_TAG_BYTES)
        return fattn_error(FATTN_E_INVALID_ARG, "plan store: engine tag of %zu bytes", r->tag_len);
    long at = control_byte_at(r->tag, r->tag_len);
    if (at >= 0)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "plan store: engine tag holds control byte 0x%02x at offset %ld",
                           (unsigned)(unsigned char)r->tag[at], at);
    if (r->workspace < 0 || r->workspace > PS_MAX_WORKSPACE_BYTES)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "plan store: workspace of %lld bytes is outside 0..%lld",
                           (long long)r->workspace, (long long)PS_MAX_WORKSPACE_BYTES);
    if (r->key_len == 0 || r->blob_len == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "plan store: empty %s",
                           r->key_len == 0 ? "key" : "plan");
    size_t fixed = PS_HEADER_BYTES + PS_TRAILER_BYTES + r->tag_len;
    if (r->key_len > PS_MAX_FILE_BYTES || r->blob_len > PS_MAX_FILE_BYTES ||
        fixed + r->key_len + r->blob_len > PS_MAX_FILE_BYTES)
        return fattn_error(FATTN_E_INVALID_ARG, "plan store: plan file would exceed %zu bytes",
                           PS_MAX_FILE_BYTES);
    size_t len = fixed + r->key_len + r->blob_len;
    unsigned char *b = malloc(len);
    if (!b)
        return fattn_error(FATTN_E_NOMEM, "plan store: %zu bytes", len);
    memcpy(b, PS_MAGIC, 8);
    put_u32(b + 8, PS_FORMAT_VERSION);
    put_u32(b + 12, (uint32_t)r->tag_len);
    put_u32(b + 16, (uint32_t)r->key_len);
    put_u32(b + 20, 0);
    put_u64(b + 24, (uint64_t)r->workspace);
    put_u64(b + 32, (uint64_t)r->blob_len);
    unsigned char *p = b + PS_HEADER_BYTES;
    if (r->tag_len)
        memcpy(p, r->tag, r->tag_len);
    p += r->tag_len;
    memcpy(p, r->key, r->key_len);
    p += r->key_len;
    memcpy(p, r->blob, r->blob_len);
    p += r->blob_len;
    put_u64(p, fattn__ps_fnv1a64(b, (size_t)(p - b)));
    *out = b;
    *out_len = len;
    return FATTN_OK;
}

fattn_status fattn__ps_decode(const unsigned char *buf, size_t len, ps_record *r)
{
    memset(r, 0, sizeof *r);
    if (len < PS_HEADER_BYTES + PS_TRAILER_BYTES)
        return fattn_error(FATTN_E_INVALID_FILE, "plan file of %zu bytes is truncated", len);
    if (memcmp(buf, PS_MAGIC, 8) != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "not a fattn plan file (bad magic)");
    uint32_t version = get_u32(buf + 8);
    if (version != PS_FORMAT_VERSION)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "plan file format version %u, this fattn reads version %u", version,
                           PS_FORMAT_VERSION);
    uint64_t tag_len = get_u32(buf + 12), key_len = get_u32(buf + 16);
    uint64_t blob_len = get_u64(buf + 32);
    if (get_u32(buf + 20) != 0)
        return fattn_error(FATTN_E_INVALID_FILE, "plan file: reserved field is not 0");
    /* Each length is checked against the file before they are added, so the
     * sum cannot wrap. */
    size_t room = len - PS_HEADER_BYTES - PS_TRAILER_BYTES;
    if (tag_len > PS_MAX_TAG_BYTES || key_len > room || blob_len > room ||
        tag_len + key_len + blob_len != room)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "plan file: lengths (tag %llu, key %llu, plan %llu) do not match its "
                           "%zu bytes (truncated or damaged)",
                           (unsigned long long)tag_len, (unsigned long long)key_len,
                           (unsigned long long)blob_len, len);
    if (key_len == 0 || blob_len == 0)
        return fattn_error(FATTN_E_INVALID_FILE, "plan file: empty %s",
                           key_len == 0 ? "key" : "plan");
    uint64_t want = get_u64(buf + len - PS_TRAILER_BYTES);
    uint64_t got = fattn__ps_fnv1a64(buf, len - PS_TRAILER_BYTES);
    if (want != got)
        return fattn_error(FATTN_E_INVALID_FILE, "plan file: checksum mismatch (damaged)");
    const char *p = (const char *)buf + PS_HEADER_BYTES;
    if (memchr(p, 0, (size_t)tag_len) || memchr(p + tag_len, 0, (size_t)key_len))
        return fattn_error(FATTN_E_INVALID_FILE, "plan file: NUL inside tag or key");
    r->tag = p;
    r->tag_len = (size_t)tag_len;
    r->key = p + tag_len;
    r->key_len = (size_t)key_len;
    r->workspace = (int64_t)get_u64(buf + 24);
    r->blob = (const unsigned char *)p + tag_len + key_len;
    r->blob_len = (size_t)blob_len;
    if (r->workspace < 0)
        return fattn_error(FATTN_E_INVALID_FILE, "plan file: negative workspace");
    if (r->workspace > PS_MAX_WORKSPACE_BYTES)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "plan file: workspace of %lld bytes exceeds %lld (no device has it)",
                           (long long)r->workspace, (long long)PS_MAX_WORKSPACE_BYTES);
    long at = control_byte_at(r->tag, r->tag_len);
    if (at >= 0)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "plan file: engine tag holds control byte 0x%02x at offset %ld",
                           (unsigned)(unsigned char)r->tag[at], at);
    return FATTN_OK;
}

/* The sticky bit; S_ISVTX is XSI, not in the POSIX base this builds with. */
#ifndef S_ISVTX
#define S_ISVTX 01000
#endif

/* ---- trust --------------------------------------------------------------------------- */

fattn_status fattn__ps_check_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return errno == ENOENT ? FATTN_OK
                               : fattn_error(FATTN_E_IO, "plan store: stat %s: %s", dir,
                                             strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return fattn_error(FATTN_E_IO, "plan store: %s is not a directory", dir);
    if (sb.st_uid != geteuid() && sb.st_uid != 0)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "plan store: %s is owned by uid %u, not by this user (uid %u) or "
                           "root: refused (its plans are GPU code this process would load)",
                           dir, (unsigned)sb.st_uid, (unsigned)geteuid());
    if ((sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX))
        return fattn_error(FATTN_E_INVALID_ARG,
                           "plan store: %s is writable by everyone without the sticky bit: "
                           "refused (anyone could replace a plan; chmod o-w or +t)",
                           dir);
    return FATTN_OK;
}

fattn_status fattn__ps_check_file_owner(const char *path, unsigned uid, unsigned mode)
{
    if (uid != (unsigned)geteuid() && uid != 0)
        return fattn_error(FATTN_E_INVALID_FILE,
                           "plan store: %s is owned by uid %u, not by this user (uid %u) or "
                           "root: refused",
                           path, uid, (unsigned)geteuid());
    if (mode & S_IWOTH)
        return fattn_error(FATTN_E_INVALID_FILE, "plan store: %s is writable by everyone: refused",
                           path);
    return FATTN_OK;
}

/* ---- reading ------------------------------------------------------------------------ */

static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* Read a whole regular file of at most PS_MAX_FILE_BYTES. *missing is set
 * (and FATTN_OK returned) when there is no such file. */
static fattn_status read_file(const char *path, unsigned char **out, size_t *out_len,
                              bool *missing)
{
    *out = NULL;
    *out_len = 0;
    *missing = false;
    /* O_NONBLOCK: a FIFO named like a plan must not block the open before
     * fstat refuses it (on a regular file it changes nothing). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT) {
            *missing = true;
            return FATTN_OK;
        }
        return fattn_error(FATTN_E_IO, "plan store: cannot open %s: %s", path, strerror(errno));
    }
    struct stat sb;
    unsigned char *buf = NULL;
    fattn_status st = FATTN_OK;
    if (fstat(fd, &sb) != 0) {
        st = fattn_error(FATTN_E_IO, "plan store: stat %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = fattn_error(FATTN_E_INVALID_FILE, "plan store: %s is not a regular file", path);
        goto out;
    }
    if (fattn__ps_check_file_owner(path, (unsigned)sb.st_uid, (unsigned)sb.st_mode) != FATTN_OK) {
        st = FATTN_E_INVALID_FILE;
        goto out;
    }
    if ((uintmax_t)sb.st_size > PS_MAX_FILE_BYTES) {
        st = fattn_error(FATTN_E_INVALID_FILE, "plan store: %s has %jd bytes (limit %zu)", path,
                         (intmax_t)sb.st_size, PS_MAX_FILE_BYTES);
        goto out;
    }
    size_t size = (size_t)sb.st_size;
    buf = malloc(size ? size : 1);
    if (!buf) {
        st = fattn_error(FATTN_E_NOMEM, "plan store: %zu bytes", size);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = fattn_error(FATTN_E_IO, "plan store: read %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break; /* shorter than fstat said: decode reports the truncation */
        got += (size_t)n;
    }
    *out = buf;
    *out_len = got;
out:
    close(fd);
    if (st != FATTN_OK)
        free(buf);
    return st;
}

fattn_status fattn__ps_lookup(const char *dir, const char *key_text, ps_loaded *out)
{
    memset(out, 0, sizeof *out);
    fattn_status trust = fattn__ps_check_dir(dir);
    if (trust != FATTN_OK)
        return trust;
    char name[PS_NAME_LEN];
    fattn__ps_file_name(key_text, name);
    char *path = join_path(dir, name);
    if (!path)
        return fattn_error(FATTN_E_NOMEM, "plan store: path");
    unsigned char *buf = NULL;
    size_t len = 0;
    bool missing = false;
    fattn_status st = read_file(path, &buf, &len, &missing);
    if (st != FATTN_OK || missing)
        goto out;
    ps_record rec;
    st = fattn__ps_decode(buf, len, &rec);
    if (st != FATTN_OK) {
        st = fattn_error(st, "plan store: %s: %s", path, fattn_last_error());
        goto out;
    }
    if (rec.key_len != strlen(key_text) || memcmp(rec.key, key_text, rec.key_len) != 0) {
        st = fattn_error(FATTN_E_INVALID_FILE,
                         "plan store: %s holds the plan of another graph or platform "
                         "(hash collision or copied file)",
                         path);
        goto out;
    }
    out->found = true;
    out->buf = buf;
    out->rec = rec;
out:
    free(path);
    if (st != FATTN_OK)
        free(buf);
    return st;
}

void fattn__ps_loaded_free(ps_loaded *l)
{
    if (!l)
        return;
    free(l->buf);
    memset(l, 0, sizeof *l);
}

/* ---- writing ------------------------------------------------------------------------ */

/* mkdir -p with mode 0700 for what it creates. */
static fattn_status make_dirs(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) == 0)
        return S_ISDIR(sb.st_mode)
                   ? FATTN_OK
                   : fattn_error(FATTN_E_IO, "plan store: %s is not a directory", dir);
    char *p = strdup(dir);
    if (!p)
        return fattn_error(FATTN_E_NOMEM, "plan store: path");
    fattn_status st = FATTN_OK;
    size_t n = strlen(p);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            st = fattn_error(FATTN_E_IO, "plan store: cannot create %s: %s", p, strerror(errno));
            goto out;
        }
        p[i] = c;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        st = fattn_error(FATTN_E_IO, "plan store: %s is not a directory", dir);
out:
    free(p);
    return st;
}

/* Distinguishes temporary names of the threads of one process (O_EXCL
 * distinguishes everything else). */
static atomic_uint g_tmp_counter;

/* All of buf to fd, then fsync: after a crash the name the caller renames
 * to must not point at a file whose data never reached the disk. */
static fattn_status write_all(int fd, const char *tmp, const void *buf, size_t len)
{
    const unsigned char *b = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, b + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fattn_error(FATTN_E_IO, "plan store: write %s: %s", tmp,
                               n < 0 ? strerror(errno) : "no progress");
        done += (size_t)n;
    }
    if (fsync(fd) != 0)
        return fattn_error(FATTN_E_IO, "plan store: fsync %s: %s", tmp, strerror(errno));
    return FATTN_OK;
}

fattn_status fattn__ps_write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    fattn_status st = make_dirs(dir);
    if (st != FATTN_OK)
        return st;
    st = fattn__ps_check_dir(dir);
    if (st != FATTN_OK)
        return st;
    char *target = join_path(dir, name);
    size_t cap = strlen(dir) + strlen(name) + 64;
    char *tmp = malloc(cap);
    if (!target || !tmp) {
        st = fattn_error(FATTN_E_NOMEM, "plan store: path");
        goto out;
    }
    /* A leading dot and ".tmp" keep temporaries apart from plans; a name
     * with this process' id and a counter, created O_EXCL, is never shared. */
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        unsigned k = atomic_fetch_add(&g_tmp_counter, 1u);
        snprintf(tmp, cap, "%s/.%s.%ld.%u.tmp", dir, name, (long)getpid(), k);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        st = fattn_error(FATTN_E_IO, "plan store: cannot create a file in %s: %s", dir,
                         strerror(errno));
        goto out;
    }
    st = write_all(fd, tmp, buf, len);
    /* the file is closed after a failed write too; the first error is the one reported */
    if (close(fd) != 0 && st == FATTN_OK)
        st = fattn_error(FATTN_E_IO, "plan store: close %s: %s", tmp, strerror(errno));
    if (st != FATTN_OK) {
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, target) != 0) {
        st = fattn_error(FATTN_E_IO, "plan store: rename %s to %s: %s", tmp, target,
                         strerror(errno));
        unlink(tmp);
        goto out;
    }
    /* Make the rename itself durable. A failure here leaves a complete
     * file under its name, so it is reported but nothing is removed. */
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0)
        st = fattn_error(FATTN_E_IO, "plan store: fsync of directory %s: %s", dir,
                         strerror(errno));
    if (dfd >= 0)
        close(dfd);
out:
    free(target);
    free(tmp);
    return st;
}

fattn_status fattn__ps_store(const char *dir, const ps_record *r)
{
    /* The key must be a C string here: the file name is its hash. */
    if (!r->key || strlen(r->key) != r->key_len)
        return fattn_error(FATTN_E_INVALID_ARG, "plan store: key is not a string of its length");
    unsigned char *img = NULL;
    size_t len = 0;
    fattn_status st = fattn__ps_encode(r, &img, &len);
    if (st != FATTN_OK)
        return st;
    char name[PS_NAME_LEN];
    fattn__ps_file_name(r->key, name);
    st = fattn__ps_write_atomic(dir, name, img, len);
    free(img);
    return st;
}
