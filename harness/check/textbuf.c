/* A bounded text buffer (see textbuf.h). */
#include <stdarg.h>
#include <stdio.h>

#include "textbuf.h"

void fh_textbuf_put(fh_textbuf *b, const char *fmt, ...)
{
    if (b->at >= b->n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->at, b->n - b->at, fmt, ap);
    va_end(ap);
    b->at = w < 0 ? b->n : b->at + (size_t)w;
}
