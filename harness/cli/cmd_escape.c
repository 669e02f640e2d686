/* The escaping of strings from files (escape.h): the page's and the JUnit
 * report's markup and the terminal's visible form. Among the commands since
 * it writes. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/* The code point of a bidirectional control starting at s (UTF-8): the
 * embeddings and overrides U+202A..E, the isolates U+2066..9, the marks
 * U+200E, U+200F and U+061C; 0 for anything else. *len its bytes. */
static unsigned bidi_control(const unsigned char *s, size_t *len)
{
    *len = 0;
    if (s[0] == 0xd8 && s[1] == 0x9c) {
        *len = 2;
        return 0x061c;
    }
    if (s[0] != 0xe2 || !s[1] || !s[2])
        return 0;
    unsigned cp = (unsigned)(s[0] & 0x0f) << 12 | (unsigned)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
    bool bidi = (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
                ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
                 cp == 0x200e || cp == 0x200f);
    *len = bidi ? 3 : 0;
    return bidi ? cp : 0;
}

void fh_escape_markup(FILE *f, const char *s, fh_markup mode)
{
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        size_t blen;
        unsigned cp = ch >= 0x80 ? bidi_control((const unsigned char *)s, &blen) : 0;
        if (cp) {
            /* shown, not obeyed: a character reference would be decoded
             * back into the control and reorder the text around it */
            fprintf(f, "\\u%04x", cp);
            s += blen - 1;
            continue;
        }
        switch (ch) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: {
            bool control = (ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f;
            fputc(control || (mode == FH_MARKUP_XML && ch >= 0x80) ? '?' : ch, f);
        }
        }
    }
}

/* The length of the UTF-8 sequence at s that may be shown as it is (a
 * printable character of 2..4 bytes), 0 when its first byte must be
 * escaped: not UTF-8 (overlong, surrogate, beyond U+10FFFF, cut short), a
 * C1 control or a bidirectional override. */
static size_t utf8_shown(const unsigned char *s)
{
    size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (!n || s[0] >= 0xf5)
        return 0;
    uint32_t cp = s[0] & (0x7f >> n);
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_of[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp <= 0x9f ||
        (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
        return 0;
    return n;
}

/* s escaped into out (room for 4 bytes per byte of s and a NUL); the
 * number of bytes that needed it. */
static size_t term_escape(const char *s, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t escaped = 0, o = 0;
    while (*p) {
        size_t keep = *p >= 0x20 && *p < 0x7f ? 1 : *p >= 0x80 ? utf8_shown(p) : 0;
        if (keep) {
            if (out)
                memcpy(out + o, p, keep);
            o += keep;
            p += keep;
            continue;
        }
        escaped++;
        if (out) {
            const char *named = *p == '\n' ? "\\n" : *p == '\r' ? "\\r" : *p == '\t' ? "\\t" : NULL;
            if (named) {
                memcpy(out + o, named, 2);
                o += 2;
            } else {
                out[o++] = '\\';
                out[o++] = 'x';
                out[o++] = hex[*p >> 4];
                out[o++] = hex[*p & 15];
            }
        }
        p++;
    }
    if (out)
        out[o] = '\0';
    return escaped;
}

#define VIS_SLOTS 8

const char *cli_vis(const char *s)
{
    static char *slot[VIS_SLOTS];
    static unsigned next;
    if (!s || !term_escape(s, NULL))
        return s;
    size_t len = strlen(s);
    if (len > (SIZE_MAX - 1) / 4)
        return "(out of memory)";
    unsigned k = next++ % VIS_SLOTS;
    free(slot[k]);
    if (!(slot[k] = malloc(len * 4 + 1)))
        return "(out of memory)";
    term_escape(s, slot[k]);
    return slot[k];
}
