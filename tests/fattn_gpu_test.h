/* The one main of the GPU suites (suite cudnn-gpu: test_cudnn_gpu.c,
 * test_cudnn_paged_gpu.c, test_cudnn_fp8_gpu.c, test_cudnn_device.c,
 * test_cudnn_plan_store_gpu.c), which run on a CUDA device or report TAP
 * "1..0 # SKIP no CUDA device" (DESIGN.md §7).
 *
 * A GPU suite defines its suite and ids as any suite does (fattn_test.h),
 * the steps around them it needs, and ends with
 *
 *   FATTN_GPU_TEST_MAIN(.make_suite = make_suite, .list_ids = list_ids,
 *                       .setup = setup, .teardown = teardown);
 *
 * The main: `--list-ids` prints the ids; the cuDNN libraries the
 * environment names are handed over (cudnn_env.h); `early`, if any, runs
 * a mode of the program's own that comes before the device check (a child
 * process of the suite); without a usable device, the skip; then, as every
 * suite (fattn_test_begin), a fresh ran-log and no core files; `setup`, if
 * any, opens what the tests share (engines) or runs a mode of its own; the
 * suite, in this process (CK_NOFORK: one CUDA context for all tests);
 * `teardown`, if any. A hook returns FATTN_GPU_TEST_GO_ON to go on, or the
 * exit status to end with (having printed "Bail out! ..." where it
 * failed).
 */
#ifndef FATTN_GPU_TEST_H
#define FATTN_GPU_TEST_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_env.h"
#include "fattn/cudnn.h"
#include "fattn_config.h"
#include "fattn_test.h"

#define FATTN_GPU_TEST_GO_ON (-1)

typedef struct fattn_gpu_suite {
    Suite *(*make_suite)(void);
    void (*list_ids)(void);
    int (*early)(int argc, char **argv);  /* NULL: none */
    int (*setup)(int argc, char **argv);  /* NULL: none */
    void (*teardown)(void);               /* NULL: none; after the suite */
} fattn_gpu_suite;

static inline int fattn_gpu_test_main(const fattn_gpu_suite *g, int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list-ids") == 0) {
        g->list_ids();
        return 0;
    }
    fattn_test_cudnn_libraries();
    int rc = g->early ? g->early(argc, argv) : FATTN_GPU_TEST_GO_ON;
    if (rc != FATTN_GPU_TEST_GO_ON)
        return rc;
    if (!FATTN_HAVE_CUDNN) {
        printf("1..0 # SKIP no CUDA device (built without cuDNN)\n");
        return 0;
    }
    if (!fattn_cudnn_available()) {
        printf("1..0 # SKIP no CUDA device (%s)\n", fattn_last_error());
        return 0;
    }
    fattn_test_begin();
    rc = g->setup ? g->setup(argc, argv) : FATTN_GPU_TEST_GO_ON;
    if (rc != FATTN_GPU_TEST_GO_ON)
        return rc;
    SRunner *sr = srunner_create(g->make_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (g->teardown)
        g->teardown();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#define FATTN_GPU_TEST_MAIN(...)                                               \
    int main(int argc, char **argv)                                            \
    {                                                                          \
        static const fattn_gpu_suite suite_ = {__VA_ARGS__};                   \
        return fattn_gpu_test_main(&suite_, argc, argv);                       \
    }

#endif /* FATTN_GPU_TEST_H */
