/* fattn/status.h — errors as values.
 *
 * Every fallible libfattn function returns a fattn_status: 0 (FATTN_OK) or a
 * named negative code. The human-readable detail of the most recent failure
 * on the calling thread is kept in a per-thread buffer and read with
 * fattn_last_error(). libfattn never prints and never exits.
 */
#ifndef FATTN_STATUS_H
#define FATTN_STATUS_H

#include "fattn/api.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fattn_status {
    FATTN_OK = 0,
    FATTN_E_INVALID_ARG = -1,      /* a caller passed something malformed */
    FATTN_E_NOMEM = -2,            /* allocation failed */
    FATTN_E_UNSUPPORTED = -3,      /* valid for TE, but this engine cannot run it */
    FATTN_E_SHAPE = -4,            /* tensor shape or stride inconsistent */
    FATTN_E_DTYPE = -5,            /* tensor dtype not allowed here */
    FATTN_E_LAYOUT = -6,           /* QKV layout unknown or not usable here */
    FATTN_E_PARSE = -7,            /* a name or document could not be parsed */
    FATTN_E_STATE = -8,            /* an operation in the wrong state */
    FATTN_E_IO = -9,               /* reading or writing a file failed */
    FATTN_E_INVALID_FILE = -10,    /* a file is not a valid fattn file */
    FATTN_E_UNSAFE_TE_QUIRK = -11, /* TE would write out of bounds here */
    FATTN_E_INVALID_CASE = -12,    /* TE itself refuses this configuration */
    FATTN_E_CUDA = -13,            /* the CUDA runtime failed */
    FATTN_E_CUDNN = -14,           /* cuDNN failed */
    FATTN_E_OVERFLOW = -15,        /* a size computation overflowed */
    FATTN_E_INTERNAL = -16,        /* an invariant of libfattn itself broke */
    FATTN_E_MISSING_FIELD = -17,   /* a required argument field was left unset */
    FATTN_E_NOT_MODELLED = -18     /* TE accepts this, fattn does not model it */
} fattn_status;

/* Short fixed description of a status ("invalid argument"). Never NULL. */
FATTN_API const char *fattn_status_str(fattn_status s);

/* The enumerator's name ("FATTN_E_INVALID_ARG"). Never NULL. */
FATTN_API const char *fattn_status_name(fattn_status s);

/* The status whose enumerator's name is `name` (fattn_status_name's
 * inverse): true and *out set, or false for any other string, including
 * the "FATTN_E_UNKNOWN" that fattn_status_name gives an unknown code. */
FATTN_API bool fattn_status_from_name(const char *name, fattn_status *out);

/* The detail message of the last failure recorded on this thread, or "" if
 * none. The pointer stays valid until the next libfattn call on this thread. */
FATTN_API const char *fattn_last_error(void);

/* Forget the last error of this thread. */
FATTN_API void fattn_clear_error(void);

/* Record a failure with a printf-style detail and return `s`, so that
 * `return fattn_error(FATTN_E_SHAPE, "q has %d dims", n);` reads naturally.
 * Used by lib/ and by the harness; exported so front ends share one channel. */
FATTN_API fattn_status fattn_error(fattn_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* FATTN_STATUS_H */
