/* fattn: the command-line tool. `fattn --help` lists the commands; each
 * command has its own --help. Messages go to stderr and name the file,
 * case, object and cause; exit codes are in cli.h. The commands themselves
 * live in the fattn_cli library (cli.c, cmd_*.c); this file dispatches. */
#include <stdio.h>
#include <string.h>

#include "fattn_config.h"

#include "cli.h"
#include "fileguard.h"
#include "isolate.h"

/* ---- main ------------------------------------------------------------------ */

static const char main_help[] =
    "usage: fattn COMMAND [OPTIONS]\n"
    "\n"
    "Prove refactors of TransformerEngine's fused attention behaviour-neutral, bit for bit.\n"
    "\n"
    "commands:\n"
    "  cases    list the cases of a matrix\n"
    "  run      step cases through inputs, forward, save_ctx, backward; write a run file\n"
    "  replay   resume every case of a run file from a stored state with another front end\n"
    "  inspect  print a run file's tree, then validate it fully\n"
    "  merge    join run files of disjoint shards of one matrix\n"
    "  diff     compare two run files: provenance, structure, bits, ULP or tolerance\n"
    "  verify   the main job: legacy vs split, replays, repeats and goldens -> one verdict\n"
    "  golden   regenerate this platform's goldens\n"
    "  report   an HTML page of a verify JSON report or of two run files' differences\n"
    "  write-tree  write a tree from a JSON manifest as a run-file-format file (for tools)\n"
    "\n"
    "exit codes: 0 identical/valid/passed, 1 a difference, 2 usage error, invalid file or\n"
    "an errored case.\n"
    "`fattn COMMAND --help` describes each command.\n"
    "default fixtures: " FATTN_SOURCE_ROOT "/fixtures\n";

int main(int argc, char **argv)
{
    /* Line-buffered even into a pipe: a CI log or `| tee` shows each table
     * row as it is made, in order with the messages on stderr, instead of
     * 4 KiB at a time at the end. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    fh_isolate_set_notice(cli_isolate_notice);
    /* until a command's --max-memory says otherwise */
    fh_fileguard_set_memory_bound(cli_default_max_memory());
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? FH_EXIT_ERROR : FH_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("fattn %s\n", FATTN_VERSION);
        return FH_EXIT_OK;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"cases", fh_cmd_cases}, {"run", fh_cmd_run},             {"replay", fh_cmd_replay},
        {"inspect", fh_cmd_inspect}, {"merge", fh_cmd_merge},
        {"diff", fh_cmd_diff}, {"verify", fh_cmd_verify}, {"golden", fh_cmd_golden},
        {"report", fh_cmd_report},
        {"write-tree", fh_cmd_write_tree},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            /* before any command asks whether cuDNN loads */
            if (cli_cudnn_libraries(argv[1]) != FH_EXIT_OK)
                return FH_EXIT_ERROR;
            int rc = cmds[i].fn(argc - 1, argv + 1);
            cli_engines_shutdown();
            return rc;
        }
    return cli_fail(argv[1], "unknown command (see fattn --help)");
}
