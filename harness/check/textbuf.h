/* harness/check/textbuf.h — a bounded text buffer for the one-line
 * summaries check/ builds (the earliest cause, the contrast).
 *
 *   fh_textbuf b = {buf, sizeof buf, 0};
 *   fh_textbuf_put(&b, "%s: ", name);
 *
 * Appends stop at the buffer's end: the text is cut there, never overrun,
 * and stays NUL-terminated (vsnprintf's own bound); later appends to a
 * full buffer do nothing.
 */
#ifndef FH_HARNESS_TEXTBUF_H
#define FH_HARNESS_TEXTBUF_H

#include <stddef.h>

typedef struct fh_textbuf {
    char *p;   /* the buffer, n bytes */
    size_t n;
    size_t at; /* bytes written so far (n once the text was cut) */
} fh_textbuf;

void fh_textbuf_put(fh_textbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* FH_HARNESS_TEXTBUF_H */
