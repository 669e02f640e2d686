/* test_cudnn_gpu --max-rows FILE (tests/cudnn_max_rows.c): what cuDNN
 * writes into Max's rows past each sequence's length. */
#ifndef FATTN_TEST_CUDNN_MAX_ROWS_H
#define FATTN_TEST_CUDNN_MAX_ROWS_H

#include "fattn/engine.h"

/* Run the measurement on the cuDNN engine `gpu`; JSON lines to path, a
 * summary on stdout. 0 when every run completed, 1 otherwise. */
int cudnn_max_rows_run(fattn_engine *gpu, const char *path);

#endif /* FATTN_TEST_CUDNN_MAX_ROWS_H */
