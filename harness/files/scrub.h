/* harness/files/scrub.h — text fattn did not write (libhdf5's error stack,
 * what a reader child printed before it died) made fit for a message: one
 * line of printable ASCII, and no memory addresses, which say nothing to
 * the reader and differ from run to run. */
#ifndef FH_HARNESS_SCRUB_H
#define FH_HARNESS_SCRUB_H

#include <stddef.h>

/* In place: every "0x" followed by four or more hex digits becomes
 * "0x...", every byte outside printable ASCII a '?', and the text ends at
 * its first line break. */
void fh_scrub_text(char *s);

/* The first line of `text` (len bytes, not NUL-terminated) that says
 * something, and its sanitizer summary line where it has one
 * ("SUMMARY: AddressSanitizer: ..."), scrubbed, into out (cap bytes, at
 * least 1); "" when there is none. */
void fh_scrub_last_words(const char *text, size_t len, char *out, size_t cap);

#endif /* FH_HARNESS_SCRUB_H */
