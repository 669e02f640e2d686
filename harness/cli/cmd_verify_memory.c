/* harness/cli/cmd_verify_memory.c — what `fattn verify` and `fattn golden`
 * hold for their cases, checked against --max-memory before any case runs
 * (the goldens file's share is what is left: cmd_verify_engine.c,
 * golden_write). */
#include "case_mem.h"
#include "cli.h"
#include "cmd_verify.h"

int fh_cmd_verify_check_memory(const char *cmd, const cli_matrix *m, bool keep_all,
                                  double max_mem, double *cases_mem)
{
    *cases_mem = 0;
    if (!(max_mem > 0))
        return FH_EXIT_OK;
    /* Each case runs both front ends and keeps their trees while a third
     * run (the wrapper, a replay, the repeat) and, for golden, the golden
     * made from them exist; verify keeps the two trees of every case until
     * its report is written, golden frees them case by case. */
    double kept = 0, worst = 0;
    const fh_spec *worst_case = NULL;
    for (size_t i = 0; i < m->n_sel; i++) {
        fh_case_mem cm;
        fh_case_memory(m->sel[i], &cm);
        double held = keep_all ? 2.0 * cm.tree : 0.0;
        double during = (keep_all ? 0.0 : 2.0 * cm.tree) + cm.peak + cm.tree;
        if (during > max_mem)
            return cli_fail(cmd, "case %s: estimated peak %.0f bytes (its two runs kept, a "
                            "third one running) exceeds --max-memory %.0f", m->sel[i]->id,
                            during, max_mem);
        kept += held;
        if (during > worst) {
            worst = during;
            worst_case = m->sel[i];
        }
    }
    *cases_mem = kept + worst;
    if (*cases_mem > max_mem)
        return cli_fail(cmd, "the %zu selected cases: estimated peak %.0f bytes (the two runs "
                        "of every case kept for the report, %.0f, and case %s running, %.0f) "
                        "exceeds --max-memory %.0f", m->n_sel, *cases_mem, kept,
                        worst_case ? worst_case->id : "?", worst, max_mem);
    return FH_EXIT_OK;
}
