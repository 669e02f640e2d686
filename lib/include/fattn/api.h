/* fattn/api.h — what libfattn exports.
 *
 * libfattn is built with hidden symbol visibility: of its functions, only
 * those declared with FATTN_API in lib/include/fattn/ are in the shared
 * library's dynamic symbol table, the promise callers may rely on. What
 * lib/'s files share beyond that is named fattn__<module>_<action> and
 * stays inside (docs/architecture.md, "Public and internal names");
 * tests/check_exports.py holds the two lists together.
 */
#ifndef FATTN_API_H
#define FATTN_API_H

#if defined(__GNUC__) || defined(__clang__)
#define FATTN_API __attribute__((visibility("default")))
#else
#define FATTN_API
#endif

#endif
