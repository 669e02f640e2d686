/* What every command writes the same way: the one error line. Kept beside
 * the commands (cmd_*.c), since only they print. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "escape.h"
#include "fileguard.h"
#include "isolate.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
    /* messages carry names and text from files (and libhdf5's, with raw
     * newlines): one visible line whatever they hold (escape.h) */
    char small[1024], *msg = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "fattn %s: %s\n", cmd, n < 0 ? fmt : cli_vis(msg ? msg : small));
    if (msg != small)
        free(msg);
    return FH_EXIT_ERROR;
}

bool cli_is_stdout(const char *path) { return path && strcmp(path, "-") == 0; }

const char *cli_self_path(void)
{
    static char self[1024];
    if (!self[0]) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0 || (size_t)n >= sizeof self - 1)
            snprintf(self, sizeof self, "fattn");
        else
            self[n] = '\0';
    }
    return self;
}

const char *cli_sh_quote(const char *s, char *buf, size_t n)
{
    bool plain = *s != '\0';
    for (const char *p = s; *p && plain; p++)
        plain = isalnum((unsigned char)*p) || strchr("/._-+=:,@%", *p);
    if (plain) {
        snprintf(buf, n, "%s", s);
        return buf;
    }
    size_t k = 0;
    if (k + 1 < n)
        buf[k++] = '\'';
    for (const char *p = s; *p && k + 6 < n; p++) {
        if (*p == '\'') {
            memcpy(buf + k, "'\\''", 4);
            k += 4;
        } else {
            buf[k++] = *p;
        }
    }
    if (k + 1 < n)
        buf[k++] = '\'';
    buf[k < n ? k : n - 1] = '\0';
    return buf;
}

int cli_write_report(const char *cmd, const char *what, const char *path, const char *text)
{
    if (cli_is_stdout(path)) {
        /* a closed or full stdout is an error too, not a silent loss */
        if (fputs(text, stdout) < 0 || fputc('\n', stdout) < 0 || fflush(stdout) != 0 ||
            ferror(stdout))
            return cli_fail(cmd, "stdout: cannot write the %s", what);
        return FH_EXIT_OK;
    }
    if (fh_fileguard_write_text(path, text, strlen(text)) != FATTN_OK)
        return cli_fail(cmd, "cannot write the %s: %s", what, fattn_last_error());
    return FH_EXIT_OK;
}

int cli_fail_at(const char *cmd, const char *path)
{
    const char *msg = fattn_last_error();
    size_t n = strlen(path);
    /* most messages start with the file already: name it once */
    if (strncmp(msg, path, n) == 0 && msg[n] == ':')
        return cli_fail(cmd, "%s", msg);
    return cli_fail(cmd, "%s: %s", path, msg);
}

bool cli_progress_wanted(bool flag) { return flag || isatty(STDERR_FILENO); }

void cli_progress_line(bool on, size_t i, size_t n, const char *id, const char *result)
{
    if (on)
        fprintf(stderr, "[%zu/%zu] %s... %s\n", i + 1, n, cli_vis(id), cli_vis(result));
}

void cli_isolate_notice(const char *path, double waited_s, unsigned cpu_limit_s)
{
    fprintf(stderr, "fattn: still reading %s after %.0f s: libhdf5 may be stuck on a malformed "
            "file; its reader is stopped after %u s of CPU time (%s), or interrupt now\n",
            cli_vis(path), waited_s, cpu_limit_s, "the limit grows with the file's size");
}
