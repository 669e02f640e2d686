/* harness/cli/escape.h — how a string that came from a file (a run file's
 * attributes, a verify JSON's fields, a matrix's ids) is written where it
 * could otherwise act: into markup (the report's HTML page, verify's JUnit
 * XML) or onto a terminal (every command's stdout and stderr). Every such
 * string goes through one of these two functions; docs/reliability.md
 * lists the attacks they close. */
#ifndef FH_HARNESS_ESCAPE_H
#define FH_HARNESS_ESCAPE_H

#include <stdio.h>

/* The markup a string is written into. Both: the five specials (& < > " ')
 * as entities, so the result is safe as text and as a quoted attribute
 * value (HTML, SVG, XML alike); control bytes (newline and tab kept) as
 * '?'; bidirectional controls (U+202A..E, U+2066..9, U+200E, U+200F,
 * U+061C) as the visible text \u202e (a character reference would be
 * decoded back into the control and reorder the page around it). HTML
 * keeps other bytes (the page is UTF-8; a browser shows a bad sequence as
 * U+FFFD, it cannot end a tag); XML writes bytes outside ASCII
 * as '?' (XML 1.0 refuses some, and fattn's messages are not promised to be
 * UTF-8). */
typedef enum fh_markup { FH_MARKUP_HTML, FH_MARKUP_XML } fh_markup;

/* s escaped for `mode` into f. NULL writes nothing. */
void fh_escape_markup(FILE *f, const char *s, fh_markup mode);

/* s as it may be shown on a terminal or in a CI log: C0 control bytes, DEL,
 * the C1 controls (U+0080..U+009F), bidirectional overrides (U+202A..E,
 * U+2066..9) and bytes that are not UTF-8 written visibly as \xNN, newline,
 * carriage return and tab as \n, \r, \t. So a file cannot move the cursor,
 * clear the screen, retitle the terminal or start a line of its own (a
 * forged "behavior-neutral: yes"). Returns s itself when nothing needs
 * escaping, else a buffer of its own that stays valid until the eighth
 * call after (so up to eight may be passed to one printf), "(out of
 * memory)" when none can be had. NULL gives NULL. */
const char *cli_vis(const char *s);

#endif /* FH_HARNESS_ESCAPE_H */
