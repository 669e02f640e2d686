/* Text fattn did not write, made fit for a message (see scrub.h). */
#include "scrub.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

void fh_scrub_text(char *s)
{
    char *w = s;
    for (const char *r = s; *r && *r != '\n' && *r != '\r';) {
        size_t n = 0;
        if (r[0] == '0' && (r[1] == 'x' || r[1] == 'X'))
            while (is_hex(r[2 + n]))
                n++;
        if (n >= 4) {
            memcpy(w, "0x...", 5); /* never longer than what it replaces (6+ bytes) */
            w += 5;
            r += 2 + n;
            continue;
        }
        unsigned char c = (unsigned char)*r++;
        *w++ = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    *w = '\0';
}

/* Line [a, b) of text into buf (cap), scrubbed. */
static void take_line(const char *a, const char *b, char *buf, size_t cap)
{
    size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
    memcpy(buf, a, n);
    buf[n] = '\0';
    fh_scrub_text(buf);
}

void fh_scrub_last_words(const char *text, size_t len, char *out, size_t cap)
{
    out[0] = '\0';
    char first[256] = "", summary[256] = "";
    for (const char *p = text, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        char line[256];
        take_line(p, e, line, sizeof line);
        const char *words = line + strspn(line, " ?"); /* indentation (a tab is a '?' now) */
        bool blank = strspn(words, " ?=-") == strlen(words);
        if (!first[0] && !blank)
            snprintf(first, sizeof first, "%s", words);
        if (!summary[0] && strncmp(line, "SUMMARY: ", 9) == 0)
            snprintf(summary, sizeof summary, "%s", line);
        p = nl ? nl + 1 : end;
    }
    if (summary[0] && strcmp(summary, first) != 0)
        snprintf(out, cap, "%s ... %s", first, summary);
    else
        snprintf(out, cap, "%s", first);
}
