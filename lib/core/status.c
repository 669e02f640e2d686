/* Status codes and the per-thread last-error message. */
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "fattn/status.h"

/* Room for a message naming long paths and its cause; a longer one keeps
 * its head and its tail, where the cause is (fattn_error). */
#define FATTN_ERRMSG_MAX 3072

static _Thread_local char last_error[FATTN_ERRMSG_MAX];

typedef struct status_row {
    fattn_status code;
    const char *name;
    const char *text;
} status_row;

#define STATUS_ROW_(name, value, text) {FATTN_##name, "FATTN_" #name, text},
static const status_row status_table[] = {FATTN_STATUS_MAP(STATUS_ROW_)};
#undef STATUS_ROW_
/* The codes are 0, -1, -2, ... without a gap or a repeat (the sum of the
 * values of n rows is -n(n-1)/2 only then, for distinct values <= 0). */
#define STATUS_N ((int)(sizeof status_table / sizeof status_table[0]))
#define STATUS_VALUE_(name, value, text) +(value)
_Static_assert(0 FATTN_STATUS_MAP(STATUS_VALUE_) == -STATUS_N * (STATUS_N - 1) / 2,
               "statuses are 0, -1, -2, ... in FATTN_STATUS_MAP");
#undef STATUS_VALUE_

static const status_row *status_find(fattn_status s)
{
    for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].code == s)
            return &status_table[i];
    return NULL;
}

const char *fattn_status_str(fattn_status s)
{
    const status_row *r = status_find(s);
    return r ? r->text : "unknown status";
}

const char *fattn_status_name(fattn_status s)
{
    const status_row *r = status_find(s);
    return r ? r->name : "FATTN_E_UNKNOWN";
}

bool fattn_status_from_name(const char *name, fattn_status *out)
{
    for (size_t i = 0; name && i < sizeof status_table / sizeof status_table[0]; i++)
        if (strcmp(status_table[i].name, name) == 0) {
            if (out)
                *out = status_table[i].code;
            return true;
        }
    return false;
}

const char *fattn_last_error(void) { return last_error; }

void fattn_clear_error(void) { last_error[0] = '\0'; }

fattn_status fattn_error(fattn_status s, const char *fmt, ...)
{
    /* Format into a scratch buffer first: callers may pass the previous
     * message itself (fattn_last_error()) as an argument. */
    char buf[FATTN_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof buf) {
        /* Too long: "<head> ... <tail>", so that the cause at the end of a
         * message (after its paths) survives. */
        char *all = malloc((size_t)n + 1);
        if (all) {
            va_start(ap, fmt);
            vsnprintf(all, (size_t)n + 1, fmt, ap);
            va_end(ap);
            static const char gap[] = " ... ";
            size_t keep = (sizeof buf - sizeof gap) / 2;
            memcpy(buf, all, keep);
            memcpy(buf + keep, gap, sizeof gap - 1);
            size_t tail = sizeof buf - 1 - keep - (sizeof gap - 1);
            memcpy(buf + keep + sizeof gap - 1, all + n - tail, tail + 1);
            free(all);
        }
    }
    memcpy(last_error, buf, sizeof buf);
    return s;
}
