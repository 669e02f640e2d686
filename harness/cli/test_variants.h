/* Test-only engine variants (see test_variants.c), only in a build with
 * -Dtesting=true (FATTN_TESTING). */
#ifndef FH_HARNESS_TEST_VARIANTS_H
#define FH_HARNESS_TEST_VARIANTS_H

#include "fattn/engine.h"

/* Wrap `inner` (from cli_engine_open; the variant gives it back with
 * cli_engine_close when it is freed) in the named variant. FATTN_TESTING
 * builds only. */
fattn_status fh_test_variant_wrap(fattn_engine *inner, const char *name,
                                     fattn_engine **out);

#endif /* FH_HARNESS_TEST_VARIANTS_H */
