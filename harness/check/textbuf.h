/* harness/check/textbuf.h — a bounded text buffer for the one-line
 * summaries check/ builds (the earliest cause, the contrast).
 *
 *   fattn_textbuf b = {buf, sizeof buf, 0};
 *   fattn_textbuf_put(&b, "%s: ", name);
 *
 * Appends stop at the buffer's end: the text is cut there, never overrun,
 * and stays NUL-terminated (vsnprintf's own bound); later appends to a
 * full buffer do nothing.
 */
#ifndef FATTN_HARNESS_TEXTBUF_H
#define FATTN_HARNESS_TEXTBUF_H

#include <stddef.h>

typedef struct fattn_textbuf {
    char *p;   /* the buffer, n bytes */
    size_t n;
    size_t at; /* bytes written so far (n once the text was cut) */
} fattn_textbuf;

void fattn_textbuf_put(fattn_textbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* FATTN_HARNESS_TEXTBUF_H */
