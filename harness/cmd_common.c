/* What every command writes the same way: the one error line. Kept beside
 * the commands (cmd_*.c), since only they print. */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

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
