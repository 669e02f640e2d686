/* harness/cli/cmd_verify_engine.c — the engine and goldens `fattn verify` opens
 * over its loaded matrix: for the command itself and for each of the plan
 * prebuild's children (cmd_verify_prebuild.c), which opens one over its share
 * of the cases without going back through the command. */
#include "fattn/engine.h"

#include "cli.h"
#include "cmd_verify.h"
#include "verify.h"

/* Bitwise checks need a backward that repeats bitwise (docs/determinism.md). */
static const fattn_engine_options deterministic_bwd = {.force_deterministic_bwd = true};

int fh_cmd_verify_open_engine(fh_cmd_verify_env *v)
{
    const char *fix_dir = v->fix_dir;
    if (v->shard_n > 0) {
        size_t kept = 0;
        for (size_t i = 0; i < v->m.n_sel; i++)
            if (i % (size_t)v->shard_n == (size_t)v->shard_k)
                v->m.sel[kept++] = v->m.sel[i];
        v->m.n_sel = kept;
    }
    fattn_engine *e = NULL;
    const char *backend_name = NULL;
    if (cli_engine_open_opts("verify", v->backend, &deterministic_bwd, &e, &backend_name) !=
        FH_EXIT_OK) {
        cli_matrix_free(&v->m);
        return FH_EXIT_ERROR;
    }
    /* Bitwise checks need a backward that repeats bitwise: on cuDNN the
     * accumulator dQ does not (docs/determinism.md), so every case runs the
     * deterministic graph here, whatever its `deterministic` key says. */
    bool forced = fattn_engine_supports(e, FATTN_ENGINE_Q_FORCED_DETERMINISTIC_BWD);
    /* the goldens get what the cases leave of --max-memory */
    double left = v->max_mem > 0 ? v->max_mem - v->cases_mem : 0.0;
    if (v->max_mem > 0 && left < 1.0)
        left = 1.0;
    if (fh_verify_goldens_open(fix_dir, e, left, &v->goldens) != FATTN_OK) {
        int rc = v->max_mem > 0
                     ? cli_fail("verify", "%s (the goldens' share: --max-memory %.0f less the "
                                "selected cases' estimated %.0f)", fattn_last_error(),
                                v->max_mem, v->cases_mem)
                     : cli_fail("verify", "%s", fattn_last_error());
        cli_engine_close(e);
        cli_matrix_free(&v->m);
        return rc;
    }
    v->e = e;
    v->backend_name = backend_name;
    v->forced = forced;
    v->opened = true;
    return FH_EXIT_OK;
}

void fh_cmd_verify_close(fh_cmd_verify_env *v)
{
    if (!v->opened)
        return;
    fh_cmd_verify_against_free(v);
    fh_verify_goldens_free(&v->goldens);
    cli_engine_close(v->e);
    cli_matrix_free(&v->m);
    v->opened = false;
}
