/* Test-only engine variants (see test_variants.c). */
#ifndef FATTN_HARNESS_TEST_VARIANTS_H
#define FATTN_HARNESS_TEST_VARIANTS_H

#include "fattn/engine.h"

/* Wrap `inner` (ownership passes to the variant) in the named variant. */
fattn_status fattn_test_variant_wrap(fattn_engine *inner, const char *name,
                                     fattn_engine **out);

#endif /* FATTN_HARNESS_TEST_VARIANTS_H */
