/* fattn verify --against [REPO@]REV: this tree against another revision
 * (docs/verify.md, "Against another revision").
 *
 * REV of REPO (default: the source tree this fattn was built from) is
 * exported with git archive into a temporary directory — nothing is written
 * into the repository — and built there (meson, tests off, the cuDNN engine
 * as in this build). Its fattn then runs the selected matrix through both
 * front ends and runs its own verify over it; this process loads REV's two
 * run files, and verify compares each case's straight runs with them
 * bitwise ("against REV: legacy", "against REV: split", with the earliest
 * cause like every check). This side is this fattn: the working tree as it
 * was built, uncommitted changes included. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fattn_config.h"

#include "cli.h"
#include "cmd_verify.h"
#include "escape.h"
#include "fileguard.h"
#include "runfile.h"

#define AGAINST_PATH 2048

/* Run argv (argv[0] found on PATH) in a child with stdout and stderr to
 * `log` (appended); its exit status, 127 when it could not be started. */
static int run_logged(char *const argv[], const char *log)
{
    int slot = -1;
    pid_t pid = fh_fileguard_fork_child(&slot);
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0)
            dup2(in, 0);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    fh_fileguard_scratch_unregister(slot);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The first line of file `path` into buf ("" if none). */
static void first_line(const char *path, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(buf, (int)n, f))
        buf[strcspn(buf, "\r\n")] = '\0';
    fclose(f);
}

/* The last `lines` lines of a log to stderr (what a failed step said). */
static void tail_log(const char *path, int lines)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char buf[64][512];
    int k = 0;
    while (fgets(buf[k % 64], sizeof buf[0], f))
        k++;
    fclose(f);
    for (int i = k > lines ? k - lines : 0; i < k; i++)
        fprintf(stderr, "  %s", cli_vis(buf[i % 64]));
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p) == 0 || errno == ENOENT ? 0 : 0; /* best effort */
}

void fh_cmd_verify_against_free(fh_cmd_verify_env *v)
{
    fh_verify_goldens *g = &v->goldens;
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        fh_h5_node_free(g->against[i]);
        g->against[i] = NULL;
    }
    if (v->against_dir[0] && !v->against_keep)
        nftw(v->against_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    v->against_dir[0] = '\0';
}

/* The selected cases in canonical form, as the --cases file REV runs. */
static int write_matrix(const fh_cmd_verify_env *v, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_fail("verify", "--against: %s: %s", path, strerror(errno));
    fputs("[\n", f);
    int rc = FH_EXIT_OK;
    for (size_t i = 0; i < v->m.n_sel && rc == FH_EXIT_OK; i++) {
        char *canon = NULL;
        if (fh_spec_canonical(v->m.sel[i], &canon) != FATTN_OK)
            rc = cli_fail("verify", "--against: %s", fattn_last_error());
        else
            fprintf(f, "%s%s\n", canon, i + 1 < v->m.n_sel ? "," : "");
        free(canon);
    }
    fputs("]\n", f);
    if (fclose(f) != 0 && rc == FH_EXIT_OK)
        rc = cli_fail("verify", "--against: %s: %s", path, strerror(errno));
    return rc;
}

/* REPO@REV or REV into repo and rev (the default repository: the source
 * tree fattn was built from). */
static void split_spec(const char *spec, char *repo, char *rev, size_t n)
{
    const char *at = strrchr(spec, '@');
    struct stat sb;
    if (at && at != spec) {
        snprintf(repo, n, "%.*s", (int)(at - spec), spec);
        if (stat(repo, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            snprintf(rev, n, "%s", at + 1);
            return;
        }
    }
    snprintf(repo, n, "%s", FATTN_SOURCE_ROOT);
    snprintf(rev, n, "%s", spec);
}

/* git rev-parse of rev in repo: the full and the short revision. */
static int resolve_rev(fh_cmd_verify_env *v, const char *repo, const char *rev,
                       const char *log)
{
    char spec[AGAINST_PATH + 16], out[AGAINST_PATH];
    snprintf(spec, sizeof spec, "%s^{commit}", rev);
    snprintf(out, sizeof out, "%s/rev.txt", v->against_dir);
    char *argv[] = {"git", "-C", (char *)repo, "rev-parse", "--verify", "--quiet", spec, NULL};
    int rc = run_logged(argv, out);
    if (rc == 127)
        return cli_fail("verify", "--against needs git, which is not installed (apt-get install "
                        "git)");
    first_line(out, v->against_sha, sizeof v->against_sha);
    if (rc != 0 || strlen(v->against_sha) < 7)
        return cli_fail("verify", "--against %s: no revision %s in %s (is it a git checkout? "
                        "git rev-parse said nothing it could use)", v->against, rev, repo);
    snprintf(v->against_short, sizeof v->against_short, "%.10s", v->against_sha);
    (void)log;
    return FH_EXIT_OK;
}

/* REV's tree exported and its fattn built; *fattn gets its path. */
static int build_rev(fh_cmd_verify_env *v, const char *repo, char *fattn, size_t n)
{
    char src[AGAINST_PATH], bld[AGAINST_PATH], tar[AGAINST_PATH], log[AGAINST_PATH];
    snprintf(src, sizeof src, "%s/src", v->against_dir);
    snprintf(bld, sizeof bld, "%s/build", v->against_dir);
    snprintf(tar, sizeof tar, "%s/rev.tar", v->against_dir);
    snprintf(log, sizeof log, "%s/build.log", v->against_dir);
    if (mkdir(src, 0777) != 0)
        return cli_fail("verify", "--against: %s: %s", src, strerror(errno));
    char *archive[] = {"git", "-C", (char *)repo, "archive", "--format=tar", "-o", tar,
                       v->against_sha, NULL};
    char *untar[] = {"tar", "-xf", tar, "-C", src, NULL};
    char *setup[] = {"meson", "setup", bld, src, "-Dtests=disabled",
                     FATTN_HAVE_CUDNN ? "-Dcuda=enabled" : "-Dcuda=disabled", NULL};
    char *compile[] = {"meson", "compile", "-C", bld, "harness/fattn", NULL};
    char *const *steps[] = {archive, untar, setup, compile};
    static const char *const what[] = {"git archive", "tar", "meson setup", "meson compile"};
    for (int i = 0; i < 4; i++) {
        int rc = run_logged(steps[i], log);
        if (rc != 0) {
            fprintf(stderr, "fattn verify: --against %s: %s failed (exit %d); the end of %s:\n",
                    cli_vis(v->against), what[i], rc, cli_vis(log));
            tail_log(log, 15);
            v->against_keep = true; /* the log stays for reading */
            return FH_EXIT_ERROR;
        }
    }
    snprintf(fattn, n, "%.1500s/harness/fattn", bld);
    return FH_EXIT_OK;
}

/* REV's fattn: run (each front end) and its own verify over the matrix. */
static int run_rev(fh_cmd_verify_env *v, const char *fattn, const char *cases)
{
    char log[AGAINST_PATH], out[AGAINST_PATH], json[AGAINST_PATH];
    snprintf(log, sizeof log, "%s/run.log", v->against_dir);
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const char *impl = fh_impl_name((fh_impl)i);
        snprintf(out, sizeof out, "%s/%s.h5", v->against_dir, impl);
        char *argv[] = {(char *)fattn, "run", "--cases", (char *)cases, "--impl", (char *)impl,
                        "--backend", (char *)v->backend_name, "-o", out, NULL};
        int rc = run_logged(argv, log);
        if (rc != 0) {
            fprintf(stderr, "fattn verify: --against %s: its fattn run --impl %s exited %d; the "
                    "end of %s:\n", cli_vis(v->against), impl, rc, cli_vis(log));
            tail_log(log, 10);
            v->against_keep = true;
            return FH_EXIT_ERROR;
        }
        if (fh_runfile_load(out, &v->goldens.against[i]) != FATTN_OK)
            return cli_fail("verify", "--against %s: %s", v->against, fattn_last_error());
    }
    snprintf(json, sizeof json, "%s/verify.json", v->against_dir);
    snprintf(out, sizeof out, "%s/verify.txt", v->against_dir);
    char *argv[] = {(char *)fattn, "verify", "--cases", (char *)cases, "--backend",
                    (char *)v->backend_name, "--json", json, NULL};
    v->against_verify_exit = run_logged(argv, out);
    /* its verdict line, for the report */
    FILE *f = fopen(out, "r");
    char line[1024];
    v->against_verdict[0] = '\0';
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "behavior-neutral: ", 18))
            snprintf(v->against_verdict, sizeof v->against_verdict, "%.*s",
                     (int)strcspn(line, "\r\n"), line);
    if (f)
        fclose(f);
    return FH_EXIT_OK;
}

int fh_cmd_verify_against_prepare(fh_cmd_verify_env *v)
{
    char repo[AGAINST_PATH], rev[AGAINST_PATH], fattn[AGAINST_PATH], cases[AGAINST_PATH];
    split_spec(v->against, repo, rev, sizeof repo);
    const char *tmp = getenv("TMPDIR");
    int w = snprintf(v->against_dir, sizeof v->against_dir, "%s/fattn-against-XXXXXX",
                     tmp && *tmp ? tmp : "/tmp");
    if (w < 0 || (size_t)w >= sizeof v->against_dir) {
        v->against_dir[0] = '\0';
        return cli_fail("verify", "--against: $TMPDIR is too long a path");
    }
    if (!mkdtemp(v->against_dir)) {
        int e = errno;
        v->against_dir[0] = '\0';
        return cli_fail("verify", "--against: cannot make a temporary directory: %s",
                        strerror(e));
    }
    int rc = resolve_rev(v, repo, rev, NULL);
    if (rc == FH_EXIT_OK)
        fprintf(stderr, "fattn verify: --against %s: building %s (%s) in %s\n",
                cli_vis(v->against), cli_vis(rev), v->against_short, cli_vis(v->against_dir));
    if (rc == FH_EXIT_OK)
        rc = build_rev(v, repo, fattn, sizeof fattn);
    snprintf(cases, sizeof cases, "%s/cases.json", v->against_dir);
    if (rc == FH_EXIT_OK)
        rc = write_matrix(v, cases);
    if (rc == FH_EXIT_OK)
        rc = run_rev(v, fattn, cases);
    snprintf(v->goldens.against_name, sizeof v->goldens.against_name, "%.100s", rev);
    return rc;
}

void fh_cmd_verify_against_print(FILE *f, const fh_cmd_verify_env *v)
{
    bool calls = true;
    for (int i = 0; i < FH_IMPL_COUNT; i++) {
        const fh_h5_node *cs = fh_h5_node_find(v->goldens.against[i], "cases");
        for (size_t k = 0; cs && k < cs->n_children && calls; k++)
            calls = !fh_h5_node_find(cs->children[k], "forward") ||
                    fh_compare_has_calls(cs->children[k]);
    }
    fprintf(f, "against %s (%s): each case's legacy and split runs bitwise against its own%s; "
            "its own verify: %s (exit %d)\n", cli_vis(v->against), v->against_short,
            calls ? "" : " (it records no engine calls: compared without them)",
            v->against_verdict[0] ? cli_vis(v->against_verdict) : "(no verdict line)",
            v->against_verify_exit);
}
