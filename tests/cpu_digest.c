/* Print one digest line per test case: "id fnv1a64-of-every-output-byte".
 *
 * Built twice, against the CPU engine compiled at -O0 and at the project's
 * optimisation level; test_cpu_bits.c runs both and demands identical lines.
 * Usage: cpu_digest THREADS
 */
#include <stdio.h>
#include <stdlib.h>

#include "cases.h"
#include "outputs_digest.h"

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    fattn_engine *e = NULL;
    if (fattn_engine_init_cpu(&e, &(fattn_cpu_options){.threads = threads}) != FATTN_OK) {
        fprintf(stderr, "cpu_digest: %s\n", fattn_last_error());
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < tcase_count; i++) {
        const tcase *c = &tcase_table[i];
        tcase_buffers buf;
        if (tcase_setup(c, &buf) != FATTN_OK || tcase_run(c, &buf, e) != FATTN_OK) {
            fprintf(stderr, "cpu_digest: %s: %s\n", c->id, fattn_last_error());
            rc = 2;
            tcase_teardown(&buf);
            continue;
        }
        printf("%s %016llx\n", c->id, (unsigned long long)tcase_outputs_digest(&buf));
        tcase_teardown(&buf);
    }
    fattn_engine_free(e);
    return rc;
}
