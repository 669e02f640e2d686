/* tests/fuzz/fuzz_spec.c — fuzz target for the case-spec parser.
 *
 * Feeds the input bytes to fh_spec_parse_json. A parse that succeeds
 * must also give a canonical form that parses back to an equal spec and a
 * summary line; any disagreement aborts (a bug, not bad input).
 *
 * Built two ways: with clang -fsanitize=fuzzer for libFuzzer runs
 * (tests/fuzz/build-libfuzzer.sh), and with the normal compiler plus
 * tests/fuzz/replay_main.c as a plain program that replays corpus files
 * (meson suite 'reliability').
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fh_spec_list list;
    fattn_status st = fh_spec_parse_json((const char *)data, size, "fuzz.json", &list);
    if (st != FATTN_OK) {
        /* Every refusal carries a message naming the source. */
        if (strstr(fattn_last_error(), "fuzz.json") == NULL) {
            fprintf(stderr, "error message without the source: %s\n", fattn_last_error());
            abort();
        }
        if (list.items != NULL || list.count != 0)
            abort();
        return 0;
    }
    for (size_t i = 0; i < list.count; i++) {
        char *canon = NULL;
        if (fh_spec_canonical(&list.items[i], &canon) != FATTN_OK) {
            fprintf(stderr, "canonical form failed: %s\n", fattn_last_error());
            abort();
        }
        fh_spec back;
        if (fh_spec_parse_one(canon, strlen(canon), "canonical", &back) != FATTN_OK) {
            fprintf(stderr, "canonical form does not parse: %s\n%s\n", fattn_last_error(), canon);
            abort();
        }
        if (!fh_spec_equal(&list.items[i], &back)) {
            fprintf(stderr, "canonical form parses to a different spec: %s\n", canon);
            abort();
        }
        char line[256];
        if (fh_spec_summary(&back, line, sizeof line) != FATTN_OK) {
            fprintf(stderr, "summary failed: %s\n", fattn_last_error());
            abort();
        }
        fh_spec_free(&back);
        free(canon);
    }
    fh_spec_list_free(&list);
    return 0;
}
