/* What every command writes the same way: the one error line. Kept beside
 * the commands (cmd_*.c), since only they print. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fileguard.h"
#include "isolate.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fattn %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return FATTN_EXIT_ERROR;
}

bool cli_is_stdout(const char *path) { return path && strcmp(path, "-") == 0; }

int cli_write_report(const char *cmd, const char *what, const char *path, const char *text)
{
    if (cli_is_stdout(path)) {
        /* a closed or full stdout is an error too, not a silent loss */
        if (fputs(text, stdout) < 0 || fputc('\n', stdout) < 0 || fflush(stdout) != 0 ||
            ferror(stdout))
            return cli_fail(cmd, "stdout: cannot write the %s", what);
        return FATTN_EXIT_OK;
    }
    if (fattn_fileguard_write_text(path, text, strlen(text)) != FATTN_OK)
        return cli_fail(cmd, "cannot write the %s: %s", what, fattn_last_error());
    return FATTN_EXIT_OK;
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
        fprintf(stderr, "[%zu/%zu] %s... %s\n", i + 1, n, id, result);
}

void cli_isolate_notice(const char *path, double waited_s, unsigned cpu_limit_s)
{
    fprintf(stderr, "fattn: still reading %s after %.0f s: libhdf5 may be stuck on a malformed "
            "file; its reader is stopped after %u s of CPU time (%s), or interrupt now\n",
            path, waited_s, cpu_limit_s, "the limit grows with the file's size");
}
