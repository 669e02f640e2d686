/* tests/fuzz/fuzz_runfile.c — fuzz target for the run-file reader.
 *
 * Writes the input bytes to a temporary file and reads it in this process
 * with fh_h5_read_file (strict, then allow_corrupt + metadata_only) and,
 * when that succeeds, validates it with fh_runfile_validate. Refusals
 * must carry a message; nothing here may crash. A crash inside libhdf5 is
 * recorded as upstream (docs/reliability.md): the CLI reads untrusted files
 * in a forked child first (harness/files/isolate.c), so it survives them.
 *
 * Built as a libFuzzer target (tests/fuzz/build-libfuzzer.sh) and, with
 * tests/fuzz/replay_main.c, as a plain corpus replayer.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5io.h"
#include "runfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char tmp_path[4096];

static void remove_tmp(void)
{
    if (tmp_path[0])
        unlink(tmp_path);
}

static const char *scratch_file(void)
{
    if (tmp_path[0])
        return tmp_path;
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    snprintf(tmp_path, sizeof tmp_path, "%s/fattn-fuzz-runfile-XXXXXX", dir);
    int fd = mkstemp(tmp_path);
    if (fd < 0) {
        perror("mkstemp");
        abort();
    }
    close(fd);
    atexit(remove_tmp);
    return tmp_path;
}

static void check_refusal(fattn_status st)
{
    if (st == FATTN_OK)
        return;
    const char *msg = fattn_last_error();
    if (msg == NULL || msg[0] == '\0') {
        fprintf(stderr, "status %s without a message\n", fattn_status_name(st));
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = scratch_file();
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if (size && fwrite(data, 1, size, f) != size) {
        perror(path);
        abort();
    }
    fclose(f);

    fh_h5_node *root = NULL;
    fattn_status st = fh_h5_read_file(path, NULL, &root);
    check_refusal(st);
    if (st == FATTN_OK) {
        st = fh_runfile_validate(path, root);
        check_refusal(st);
    }
    fh_h5_node_free(root);

    root = NULL;
    fh_h5_read_opts opts = {.allow_corrupt = true, .metadata_only = true};
    st = fh_h5_read_file(path, &opts, &root);
    check_refusal(st);
    fh_h5_node_free(root);
    return 0;
}
