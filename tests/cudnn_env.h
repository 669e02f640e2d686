/* The cuDNN libraries a test program loads: $FATTN_CUDNN_LIB and
 * $FATTN_CUDART_LIB, handed to the library as the CLI hands them (the
 * library reads no environment; docs/cudnn-engine.md, "Another cuDNN"),
 * before anything loads them. Every program that may load cuDNN calls it
 * first: in make_suite, or at the top of its own main. */
#ifndef FATTN_TEST_CUDNN_ENV_H
#define FATTN_TEST_CUDNN_ENV_H

#include <stdio.h>
#include <stdlib.h>

#include "fattn/cudnn.h"

static inline void fattn_test_cudnn_libraries(void)
{
    fattn_cudnn_settings s;
    if (fattn_cudnn_settings_parse(NULL, NULL, NULL, NULL, NULL, getenv("FATTN_CUDNN_LIB"),
                                   getenv("FATTN_CUDART_LIB"), &s) != FATTN_OK ||
        fattn_cudnn_use_libraries(&s) != FATTN_OK) {
        fprintf(stderr, "cuDNN libraries: %s\n", fattn_last_error());
        exit(2);
    }
}

#endif /* FATTN_TEST_CUDNN_ENV_H */
