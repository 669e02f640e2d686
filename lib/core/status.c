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

static const status_row status_table[] = {
    {FATTN_OK, "FATTN_OK", "ok"},
    {FATTN_E_INVALID_ARG, "FATTN_E_INVALID_ARG", "invalid argument"},
    {FATTN_E_NOMEM, "FATTN_E_NOMEM", "out of memory"},
    {FATTN_E_UNSUPPORTED, "FATTN_E_UNSUPPORTED", "not supported by this engine"},
    {FATTN_E_SHAPE, "FATTN_E_SHAPE", "inconsistent tensor shape"},
    {FATTN_E_DTYPE, "FATTN_E_DTYPE", "tensor dtype not allowed"},
    {FATTN_E_LAYOUT, "FATTN_E_LAYOUT", "unusable QKV layout"},
    {FATTN_E_PARSE, "FATTN_E_PARSE", "parse error"},
    {FATTN_E_STATE, "FATTN_E_STATE", "invalid state transition"},
    {FATTN_E_IO, "FATTN_E_IO", "I/O error"},
    {FATTN_E_INVALID_FILE, "FATTN_E_INVALID_FILE", "invalid file"},
    {FATTN_E_UNSAFE_TE_QUIRK, "FATTN_E_UNSAFE_TE_QUIRK",
     "TransformerEngine quirk that would access memory out of bounds"},
    {FATTN_E_INVALID_CASE, "FATTN_E_INVALID_CASE",
     "configuration refused by TransformerEngine"},
    {FATTN_E_CUDA, "FATTN_E_CUDA", "CUDA error"},
    {FATTN_E_CUDNN, "FATTN_E_CUDNN", "cuDNN error"},
    {FATTN_E_OVERFLOW, "FATTN_E_OVERFLOW", "size overflow"},
    {FATTN_E_INTERNAL, "FATTN_E_INTERNAL", "internal error"},
    {FATTN_E_MISSING_FIELD, "FATTN_E_MISSING_FIELD", "required field not set"},
    {FATTN_E_NOT_MODELLED, "FATTN_E_NOT_MODELLED", "accepted by TE, not modelled by fattn"},
};

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
