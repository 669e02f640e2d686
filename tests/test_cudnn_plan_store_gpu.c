/* The cuDNN engine's plan store on a GPU (meson suite cudnn-gpu; TAP
 * "1..0 # SKIP" without one). docs/cudnn-engine.md, "Plan store".
 *
 * A plan store only matters across processes, so the checks run the same
 * calls in separate processes (this executable re-run with --phase) over
 * one store directory and compare what they report:
 *
 *   1. cold: empty store. Every plan is built; each serializable one is
 *      written (at least one must be: else the store does nothing here).
 *   2. warm: a new process restores every written plan instead of building
 *      it, with the same engine tags, and produces bitwise-identical
 *      outputs (every output buffer of every call, poison regions included).
 *      Restoring is faster than building; the times are printed.
 *   3. damaged: one file gets a flipped bit (the checksum refuses it), one a
 *      cut plan resealed with a valid checksum (cuDNN itself must refuse
 *      it). Both plans are rebuilt, outputs still identical, files rewritten.
 *   4. healed: a further process restores every plan again.
 *   5. autotune: two processes with FATTN_CUDNN_AUTOTUNE=1 on the same
 *      store; the first writes its winners beside the untuned plans, the
 *      second restores them with the same outputs.
 *
 * Each phase runs every call of `calls` once, then the first again (which
 * must come from the engine's memory cache), with the deterministic
 * backward forced so that reruns are bitwise comparable.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cudnn_env.h"
#include "cases.h"
#include "cudnn/plan_store.h"
#include "fattn/cudnn.h"
#include "fattn_config.h"
#include "fattn_gpu_test.h"
#include "fattn_test.h"

/* Routes covered: composite forward and backward (causal; dropout; ragged
 * THD) and the native SDPA_FWD forward. */
static const char *const calls[] = {
    "bwd.causal.bf16",
    "fwd.nomask.f16",
    "bwd.dropout.p01.bf16",
    "bwd.layout.thd_thd_thd.bf16",
};
#define N_CALLS ((int)(sizeof calls / sizeof calls[0]))

/* ---- phase (child process) ---------------------------------------------------- */

static int write_tensor(FILE *f, const fattn_tensor *t)
{
    if (fattn_tensor_is_empty(t))
        return 0;
    if (!fattn_tensor_is_contiguous(t))
        return -1;
    size_t n = (size_t)fattn_tensor_numel(t) * fattn_dtype_size(t->dtype);
    return fwrite(t->data, 1, n, f) == n ? 0 : -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run every call on an engine with its store in `store`. out.txt gets one
 * line per call: case, where its last plan came from, that plan's tag and
 * plan time (build or restore), the plans built and restored during the
 * call, and the call's wall time; then the engine's counters. out.bin gets
 * every output buffer's bytes. */
static int run_phase(const char *store, const char *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.txt", out);
    FILE *txt = fopen(path, "w");
    snprintf(path, sizeof path, "%s.bin", out);
    FILE *bin = fopen(path, "wb");
    if (!txt || !bin) {
        fprintf(stderr, "phase: cannot write %s: %s\n", out, strerror(errno));
        return 2;
    }
    fattn_cudnn_options opt = {.device = 0, .force_deterministic_bwd = true};
    fattn_engine *e = NULL;
    /* the parent sets FATTN_CUDNN_AUTOTUNE for a tuned phase; the library
     * reads no environment, so the phase hands it over as the CLI does */
    if (fattn_cudnn_settings_parse(getenv("FATTN_CUDNN_AUTOTUNE"), NULL, NULL, NULL, store,
                                   getenv("FATTN_CUDNN_LIB"), getenv("FATTN_CUDART_LIB"),
                                   &opt.settings) != FATTN_OK ||
        fattn_engine_init_cudnn(&e, &opt) != FATTN_OK) {
        fprintf(stderr, "phase: %s\n", fattn_last_error());
        return 2;
    }
    int rc = 0;
    double total = 0;
    for (int i = 0; i <= N_CALLS && rc == 0; i++) {
        const tcase *c = tcase_find(calls[i % N_CALLS]);
        tcase_buffers buf;
        if (!c || tcase_setup(c, &buf) != FATTN_OK) {
            fprintf(stderr, "phase: case %s: %s\n", calls[i % N_CALLS], fattn_last_error());
            rc = 2;
            break;
        }
        fattn_cudnn_plan_store_stats s0, s1;
        fattn_cudnn_plan_cache_stats(fattn_cudnn_engine_plan_cache(e), &s0);
        double t0 = now_s();
        fattn_status st = tcase_run(c, &buf, e);
        double wall = now_s() - t0;
        total += wall;
        fattn_cudnn_plan_cache_stats(fattn_cudnn_engine_plan_cache(e), &s1);
        if (st != FATTN_OK) {
            fprintf(stderr, "phase: case %s: %s\n", c->id, fattn_last_error());
            rc = 2;
        } else {
            fattn_engine_report rep = fattn_engine_last_report(e);
            fattn_engine_timing tm = rep.timing;
            fprintf(txt, "call %s %s %s %.6f %lld %lld %.6f\n", c->id,
                    rep.plan_source, rep.tag, tm.plan_build_s,
                    (long long)(s1.built - s0.built), (long long)(s1.loaded - s0.loaded), wall);
            if (write_tensor(bin, &buf.o) || write_tensor(bin, &buf.stats) ||
                write_tensor(bin, &buf.dq_storage) || write_tensor(bin, &buf.dk_storage) ||
                write_tensor(bin, &buf.dv_storage) || write_tensor(bin, &buf.d_bias) ||
                write_tensor(bin, &buf.d_softmax_offset)) {
                fprintf(stderr, "phase: case %s: cannot write outputs\n", c->id);
                rc = 2;
            }
        }
        tcase_teardown(&buf);
    }
    fprintf(txt, "total %.6f\n", total);
    fattn_cudnn_plan_store_stats s;
    fattn_cudnn_plan_cache_stats(fattn_cudnn_engine_plan_cache(e), &s);
    fprintf(txt,
            "stats enabled=%d built=%lld loaded=%lld stored=%lld unserializable=%lld "
            "missing=%lld rejected=%lld write_failed=%lld plans=%d\n",
            (int)s.store_enabled, (long long)s.built, (long long)s.loaded, (long long)s.stored,
            (long long)s.unserializable, (long long)s.missing, (long long)s.rejected,
            (long long)s.write_failed, fattn_engine_last_report(e).plans);
    fprintf(txt, "note %s\n", s.last_note);
    fattn_engine_free(e);
    if (fclose(txt) != 0 || fclose(bin) != 0)
        rc = 2;
    return rc;
}

/* ---- parent ------------------------------------------------------------------------ */

typedef struct phase_result {
    long long built, loaded, stored, unserializable, missing, rejected, write_failed;
    int enabled, plans;
    char note[600];
    unsigned char *bin;
    size_t bin_len;
    char txt[16384];
} phase_result;

static char g_work[512], g_store[600];

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* Run this executable with --phase in a new process. */
static void phase(const char *name, phase_result *r)
{
    memset(r, 0, sizeof *r);
    char out[600], self[4096];
    snprintf(out, sizeof out, "%s/%s", g_work, name);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_msg(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    self[n] = 0;
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl(self, self, "--phase", g_store, out, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "phase %s: child %s %d", name, WIFEXITED(status) ? "exited" : "killed by",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    char path[700];
    size_t len = 0;
    snprintf(path, sizeof path, "%s.txt", out);
    unsigned char *txt = slurp(path, &len);
    ck_assert_ptr_nonnull(txt);
    snprintf(r->txt, sizeof r->txt, "%s", (char *)txt);
    const char *st = strstr((char *)txt, "\nstats ");
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(sscanf(st + 1,
                            "stats enabled=%d built=%lld loaded=%lld stored=%lld "
                            "unserializable=%lld missing=%lld rejected=%lld write_failed=%lld "
                            "plans=%d",
                            &r->enabled, &r->built, &r->loaded, &r->stored, &r->unserializable,
                            &r->missing, &r->rejected, &r->write_failed, &r->plans),
                     9);
    const char *note = strstr((char *)txt, "\nnote ");
    if (note)
        snprintf(r->note, sizeof r->note, "%.*s", (int)strcspn(note + 6, "\n"), note + 6);
    free(txt);
    snprintf(path, sizeof path, "%s.bin", out);
    r->bin = slurp(path, &r->bin_len);
    ck_assert_ptr_nonnull(r->bin);
    printf("# phase %s: built %lld, loaded %lld, stored %lld, unserializable %lld, missing %lld, "
           "rejected %lld, write_failed %lld; %d plans%s%s\n",
           name, r->built, r->loaded, r->stored, r->unserializable, r->missing, r->rejected,
           r->write_failed, r->plans, *r->note ? "; last note: " : "", r->note);
}

/* One "call" line of a phase. */
typedef struct call_info {
    char id[64], source[16], tag[96];
    double plan_s, wall_s;
    long long built, loaded;
} call_info;

static int calls_of(const phase_result *r, call_info *out, int cap)
{
    int n = 0;
    const char *p = r->txt;
    while ((p = strstr(p, "call ")) && n < cap) {
        call_info *c = &out[n];
        ck_assert_int_eq(sscanf(p, "call %63s %15s %95s %lf %lld %lld %lf", c->id, c->source,
                                c->tag, &c->plan_s, &c->built, &c->loaded, &c->wall_s),
                         7);
        n++;
        p += 5;
    }
    return n;
}

static double total_of(const phase_result *r)
{
    const char *p = strstr(r->txt, "\ntotal ");
    double t = -1;
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p + 1, "total %lf", &t), 1);
    return t;
}

static int count_plan_files(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' 2>/dev/null | grep -c '\\.plan$'", g_store);
    FILE *f = popen(cmd, "r");
    int n = 0;
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = 0;
        pclose(f);
    }
    return n;
}

static phase_result g_cold, g_warm;

START_TEST(gpu_plan_store_cold)
{
    phase("cold", &g_cold);
    ck_assert_int_eq(g_cold.enabled, 1);
    ck_assert_int_eq(g_cold.loaded, 0);
    ck_assert_int_eq(g_cold.rejected, 0);
    ck_assert_int_eq(g_cold.write_failed, 0);
    ck_assert_int_eq(g_cold.built, g_cold.plans);
    ck_assert_int_eq(g_cold.missing, g_cold.plans);
    ck_assert_int_eq(g_cold.stored + g_cold.unserializable, g_cold.built);
    ck_assert_msg(g_cold.stored > 0, "no plan could be serialized: %s", g_cold.note);
    ck_assert_int_eq(count_plan_files(), (int)g_cold.stored);
    call_info c[N_CALLS + 1];
    ck_assert_int_eq(calls_of(&g_cold, c, N_CALLS + 1), N_CALLS + 1);
    for (int i = 0; i < N_CALLS; i++)
        ck_assert_msg(!strcmp(c[i].source, "built"), "%s: %s", c[i].id, c[i].source);
    /* the repeated first call came from this engine's memory */
    ck_assert_str_eq(c[N_CALLS].source, "memory");
    ck_assert_int_eq(c[N_CALLS].built + c[N_CALLS].loaded, 0);
    fattn_test_mark("cudnn.gpu.plan_store.cold");
}
END_TEST

START_TEST(gpu_plan_store_warm)
{
    phase("warm", &g_warm);
    ck_assert_int_eq(g_warm.loaded, g_cold.stored);
    ck_assert_int_eq(g_warm.built, g_cold.unserializable);
    ck_assert_int_eq(g_warm.rejected, 0);
    ck_assert_int_eq(g_warm.stored, 0);
    ck_assert_int_eq(g_warm.plans, g_cold.plans);
    call_info a[N_CALLS + 1], b[N_CALLS + 1];
    ck_assert_int_eq(calls_of(&g_cold, a, N_CALLS + 1), N_CALLS + 1);
    ck_assert_int_eq(calls_of(&g_warm, b, N_CALLS + 1), N_CALLS + 1);
    for (int i = 0; i <= N_CALLS; i++) {
        /* same plans in every call, from the store where one was written */
        ck_assert_str_eq(a[i].id, b[i].id);
        ck_assert_str_eq(a[i].tag, b[i].tag);
        ck_assert_int_eq(a[i].built + a[i].loaded, b[i].built + b[i].loaded);
        printf("# %-28s %-6s %-14s cold: plan %.3f s, call %.3f s; warm (%s): plan %.3f s, "
               "call %.3f s\n",
               a[i].id, i < N_CALLS ? "" : "(again)", a[i].tag, a[i].plan_s, a[i].wall_s,
               b[i].source, b[i].plan_s, b[i].wall_s);
    }
    /* bitwise-identical outputs, every buffer of every call */
    ck_assert_uint_eq(g_cold.bin_len, g_warm.bin_len);
    ck_assert_msg(memcmp(g_cold.bin, g_warm.bin, g_cold.bin_len) == 0,
                  "outputs of restored plans differ from those of built plans");
    fattn_test_mark("cudnn.gpu.plan_store.warm");
}
END_TEST

/* The point of the store: the calls of a new process are faster with it. */
START_TEST(gpu_plan_store_faster)
{
    double cold = total_of(&g_cold), warm = total_of(&g_warm);
    printf("# all %d calls: %.3f s in the cold process, %.3f s with the store (%lld plans "
           "built, then %lld restored)\n",
           N_CALLS + 1, cold, warm, g_cold.built, g_warm.loaded);
    ck_assert_msg(warm < cold, "with the store (%.3f s) not faster than without (%.3f s)", warm,
                  cold);
    fattn_test_mark("cudnn.gpu.plan_store.faster");
}
END_TEST

/* Damage two stored files: a flipped bit, and a cut plan resealed. */
static void damage_files(int *flipped, int *resealed)
{
    *flipped = *resealed = 0;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' | grep '\\.plan$' | sort", g_store);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char name[256];
    while (fgets(name, sizeof name, f) && (!*flipped || !*resealed)) {
        name[strcspn(name, "\n")] = 0;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", g_store, name);
        size_t len = 0;
        unsigned char *img = slurp(path, &len);
        ck_assert_ptr_nonnull(img);
        ps_record r;
        ck_assert_int_eq(fattn__ps_decode(img, len, &r), FATTN_OK);
        unsigned char *out = NULL;
        size_t out_len = 0;
        if (!*flipped) {
            img[len / 2] ^= 0x04;
            out = img;
            out_len = len;
            *flipped = 1;
        } else {
            /* a valid file whose plan is cut in half: only cuDNN can tell */
            ps_record cut = r;
            cut.blob_len = r.blob_len / 2;
            ck_assert_int_eq(fattn__ps_encode(&cut, &out, &out_len), FATTN_OK);
            *resealed = 1;
        }
        FILE *w = fopen(path, "wb");
        ck_assert_ptr_nonnull(w);
        ck_assert_int_eq(fwrite(out, 1, out_len, w), out_len);
        ck_assert_int_eq(fclose(w), 0);
        if (out != img)
            free(out);
        free(img);
    }
    pclose(f);
}

START_TEST(gpu_plan_store_damaged)
{
    int flipped = 0, resealed = 0;
    damage_files(&flipped, &resealed);
    phase_result r, healed;
    phase("damaged", &r);
    ck_assert_int_eq(r.rejected, flipped + resealed);
    ck_assert_int_eq(r.loaded, g_cold.stored - (flipped + resealed));
    ck_assert_int_eq(r.built, g_cold.unserializable + flipped + resealed);
    ck_assert_int_eq(r.stored, flipped + resealed); /* rewritten */
    ck_assert_uint_eq(r.bin_len, g_cold.bin_len);
    ck_assert_msg(memcmp(r.bin, g_cold.bin, r.bin_len) == 0,
                  "outputs after rebuilding damaged plans differ");
    phase("healed", &healed);
    ck_assert_int_eq(healed.rejected, 0);
    ck_assert_int_eq(healed.loaded, g_cold.stored);
    ck_assert_uint_eq(healed.bin_len, g_cold.bin_len);
    ck_assert(memcmp(healed.bin, g_cold.bin, healed.bin_len) == 0);
    free(r.bin);
    free(healed.bin);
    fattn_test_mark("cudnn.gpu.plan_store.damaged");
}
END_TEST

/* Autotune (FATTN_CUDNN_AUTOTUNE=1) over the same store: its winners are
 * written under keys of their own (the untuned files there are neither
 * restored nor replaced), and a new tuned process restores every written
 * winner without timing again, with bitwise the same outputs. */
START_TEST(gpu_plan_store_autotune)
{
    int files_before = count_plan_files();
    phase_result a, w;
    setenv("FATTN_CUDNN_AUTOTUNE", "1", 1);
    phase("autotune", &a);
    phase("autotune-warm", &w);
    unsetenv("FATTN_CUDNN_AUTOTUNE");
    ck_assert_int_eq(a.loaded, 0);
    ck_assert_int_eq(a.rejected, 0);
    ck_assert_int_eq(a.write_failed, 0);
    ck_assert_int_ge(a.built, a.plans); /* candidates count as builds */
    ck_assert_int_eq(a.stored + a.unserializable, a.plans);
    ck_assert_msg(a.stored > 0, "no tuned plan could be serialized: %s", a.note);
    ck_assert_int_eq(count_plan_files(), files_before + (int)a.stored);
    ck_assert_int_eq(w.loaded, a.stored);
    ck_assert_int_eq(w.stored, 0);
    ck_assert_int_eq(w.rejected, 0);
    ck_assert_int_eq(w.bin_len, a.bin_len);
    ck_assert_msg(!memcmp(w.bin, a.bin, a.bin_len), "restored winners give other outputs");
    call_info ca[N_CALLS + 1], cw[N_CALLS + 1];
    ck_assert_int_eq(calls_of(&a, ca, N_CALLS + 1), N_CALLS + 1);
    ck_assert_int_eq(calls_of(&w, cw, N_CALLS + 1), N_CALLS + 1);
    for (int i = 0; i < N_CALLS; i++)
        ck_assert_msg(!strcmp(ca[i].tag, cw[i].tag), "%s: tuned %s, restored %s", ca[i].id,
                      ca[i].tag, cw[i].tag);
    free(a.bin);
    free(w.bin);
    fattn_test_mark("cudnn.gpu.plan_store.autotune");
}
END_TEST

static void list_ids(void)
{
    puts("cudnn.gpu.plan_store.cold");
    puts("cudnn.gpu.plan_store.warm");
    puts("cudnn.gpu.plan_store.faster");
    puts("cudnn.gpu.plan_store.damaged");
    puts("cudnn.gpu.plan_store.autotune");
}

/* A child process of the suite: one phase (run_phase), before the skip. */
static int early(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--phase") == 0)
        return run_phase(argv[2], argv[3]);
    return FATTN_GPU_TEST_GO_ON;
}

static int setup(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_work, sizeof g_work, "%s/fattn-plan-store-gpu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_work)) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    snprintf(g_store, sizeof g_store, "%s/store", g_work);
    return FATTN_GPU_TEST_GO_ON;
}

/* The checks build on each other (one store, phase after phase): the
 * main runs them in order, in this process. */
static Suite *make_suite(void)
{
    Suite *s = suite_create("cudnn-plan-store-gpu");
    TCase *tc = tcase_create("plan_store");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(tc, gpu_plan_store_cold);
    tcase_add_test(tc, gpu_plan_store_warm);
    tcase_add_test(tc, gpu_plan_store_faster);
    tcase_add_test(tc, gpu_plan_store_damaged);
    tcase_add_test(tc, gpu_plan_store_autotune);
    suite_add_tcase(s, tc);
    return s;
}

static void teardown(void)
{
    printf("# store and phase outputs kept in %s\n", g_work);
}

FATTN_GPU_TEST_MAIN(.make_suite = make_suite, .list_ids = list_ids, .early = early,
                    .setup = setup, .teardown = teardown)
