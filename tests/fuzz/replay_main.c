/* tests/fuzz/replay_main.c — a main() that replays corpus files through a
 * fuzz target's LLVMFuzzerTestOneInput, so the targets build and run with
 * the normal compiler (no clang, no libFuzzer) in meson suite
 * 'reliability', and under ASan/UBSan in the sanitizer build.
 *
 * usage: fuzz_X_replay PATH...   (each PATH a file or a directory of files)
 * Prints TAP: one test per file; a crash ends the program (meson then
 * reports the test failed).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static void push(name_list *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) {
            perror("realloc");
            exit(2);
        }
    }
    l->v[l->n] = strdup(s);
    if (!l->v[l->n]) {
        perror("strdup");
        exit(2);
    }
    l->n++;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void collect(name_list *l, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (!S_ISDIR(sb.st_mode)) {
        push(l, path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        exit(2);
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *full = malloc(len);
        if (!full) {
            perror("malloc");
            exit(2);
        }
        snprintf(full, len, "%s/%s", path, e->d_name);
        collect(l, full);
        free(full);
    }
    closedir(d);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    name_list l = {0};
    for (int i = 1; i < argc; i++)
        collect(&l, argv[i]);
    if (l.n == 0) {
        printf("1..1\nnot ok 1 - no corpus files given\n");
        return 1;
    }
    qsort(l.v, l.n, sizeof *l.v, cmp_str);
    printf("1..%zu\n", l.n);
    fflush(stdout);
    int bad = 0;
    for (size_t i = 0; i < l.n; i++) {
        size_t len = 0;
        unsigned char *buf = slurp(l.v[i], &len);
        if (!buf) {
            printf("not ok %zu - %s: unreadable\n", i + 1, l.v[i]);
            bad = 1;
        } else {
            /* A copy of exactly len bytes, so ASan sees reads past the end. */
            unsigned char *exact = malloc(len ? len : 1);
            if (!exact) {
                perror("malloc");
                return 2;
            }
            memcpy(exact, buf, len);
            free(buf);
            LLVMFuzzerTestOneInput(exact, len);
            free(exact);
            printf("ok %zu - %s\n", i + 1, l.v[i]);
        }
        fflush(stdout);
        free(l.v[i]);
    }
    free(l.v);
    return bad;
}
