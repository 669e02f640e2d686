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

/* Every status, one row each: X(name, value, text) — the enumerator
 * FATTN_<name>, its value and its short description (fattn_status_str;
 * fattn_status_name spells the enumerator), after what it means. The enum
 * and the name table (lib/core/status.c) are made from it, so a status is
 * one row here (as libuv's UV_ERRNO_MAP). */
#define FATTN_STATUS_MAP(X)                                                                        \
    X(OK, 0, "ok")                                                                                 \
    /* a caller passed something malformed */                                                      \
    X(E_INVALID_ARG, -1, "invalid argument")                                                       \
    /* allocation failed */                                                                        \
    X(E_NOMEM, -2, "out of memory")                                                                \
    /* valid for TE, but this engine cannot run it */                                              \
    X(E_UNSUPPORTED, -3, "not supported by this engine")                                           \
    /* tensor shape or stride inconsistent */                                                      \
    X(E_SHAPE, -4, "inconsistent tensor shape")                                                    \
    /* tensor dtype not allowed here */                                                            \
    X(E_DTYPE, -5, "tensor dtype not allowed")                                                     \
    /* QKV layout unknown or not usable here */                                                    \
    X(E_LAYOUT, -6, "unusable QKV layout")                                                         \
    /* a name or document could not be parsed */                                                   \
    X(E_PARSE, -7, "parse error")                                                                  \
    /* an operation in the wrong state */                                                          \
    X(E_STATE, -8, "invalid state transition")                                                     \
    /* reading or writing a file failed */                                                         \
    X(E_IO, -9, "I/O error")                                                                       \
    /* a file is not a valid fattn file */                                                         \
    X(E_INVALID_FILE, -10, "invalid file")                                                         \
    /* TE would write out of bounds here */                                                        \
    X(E_UNSAFE_TE_QUIRK, -11, "TransformerEngine quirk that would access memory out of bounds")    \
    /* TE itself refuses this configuration */                                                     \
    X(E_INVALID_CASE, -12, "configuration refused by TransformerEngine")                           \
    /* the CUDA runtime failed */                                                                  \
    X(E_CUDA, -13, "CUDA error")                                                                   \
    /* cuDNN failed */                                                                             \
    X(E_CUDNN, -14, "cuDNN error")                                                                 \
    /* a size computation overflowed */                                                            \
    X(E_OVERFLOW, -15, "size overflow")                                                            \
    /* an invariant of libfattn itself broke */                                                    \
    X(E_INTERNAL, -16, "internal error")                                                           \
    /* a required argument field was left unset */                                                 \
    X(E_MISSING_FIELD, -17, "required field not set")                                              \
    /* TE accepts this, fattn does not model it */                                                 \
    X(E_NOT_MODELLED, -18, "accepted by TE, not modelled by fattn")

#define FATTN_STATUS_ENUM_(name, value, text) FATTN_##name = value,
typedef enum fattn_status { FATTN_STATUS_MAP(FATTN_STATUS_ENUM_) } fattn_status;
#undef FATTN_STATUS_ENUM_

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
