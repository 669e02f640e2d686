/* fattn diff: the command line over diff.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "diff.h"

static const char diff_help[] =
    "usage: fattn diff A.h5 B.h5 [--mode bitwise|ulp|tol] [--max-ulp N] [--tol-profile F]\n"
    "                  [--tol GLOB=RTOL,ATOL]... [--only GLOB] [--trust-digests] [--audit]\n"
    "                  [--json F]\n"
    "\n"
    "Compare two run files. B is the reference: A is compared against it.\n"
    "Printed first: the provenance delta (root attributes but schema, and prov_* attributes),\n"
    "never counted, with what it implies (bitwise equality is expected only on the same\n"
    "platform). Then structure (missing/extra datasets and attributes, dtype and shape),\n"
    "corrupt datasets (stored digest != data), and one summary per differing dataset:\n"
    "count, max ulp, max abs, max rel (over |b|), RMSE, NMSE, SNR, a ULP histogram and the\n"
    "worst 5 elements with index, values and bits. _impl groups are listed, never counted;\n"
    "/audit is compared only with --audit.\n"
    "\n"
    "  --mode bitwise   (default) every stored bit counts: NaN payloads, +0/-0\n"
    "  --mode ulp       a float element passes within --max-ulp N (default 0) on its format's\n"
    "                   lattice; NaN equals NaN (any payload), +0 equals -0, a class change\n"
    "                   (finite/inf/NaN, inf sign) fails\n"
    "  --mode tol       a float element passes if |a-b| <= atol + rtol*|b|; per-dtype profile\n"
    "                   (built in: " FATTN_TOL_BUILTIN_VERSION ";\n"
    "                   --tol-profile F replaces it); --tol GLOB=RTOL,ATOL overrides per path,\n"
    "                   repeatable, the last match wins\n"
    "  integers always compare exactly\n"
    "  --only GLOB      restrict to paths matching GLOB ('*' crosses '/')\n"
    "  --trust-digests  datasets whose stored digests agree are not read\n"
    "  --json F         write the whole report as JSON (schema fattn-diff/1, docs/diff.md)\n"
    "\n"
    "Exit 0 identical in the mode, 1 any counted difference (a corrupt dataset included),\n"
    "2 usage error or a file that cannot be read safely.\n";

int fattn_cmd_diff(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL};
    const char *mode = NULL, *max_ulp = NULL, *profile = NULL, *only = NULL, *json = NULL;
    const char *tols[64];
    size_t n_tols = 0;
    bool trust = false, audit = false;
    cli_args a = {argc, argv, 1, "diff"};
    for (; a.i < argc; a.i++) {
        int r;
        const char *v = NULL;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            fputs(diff_help, stdout);
            return FATTN_EXIT_OK;
        } else if (cli_flag(&a, "--trust-digests")) {
            trust = true;
        } else if (cli_flag(&a, "--audit")) {
            audit = true;
        } else if ((r = cli_opt(&a, "--tol-profile", &profile)) ||
                   (r = cli_opt(&a, "--mode", &mode)) || (r = cli_opt(&a, "--max-ulp", &max_ulp)) ||
                   (r = cli_opt(&a, "--only", &only)) || (r = cli_opt(&a, "--json", &json))) {
            if (r < 0)
                return cli_fail("diff", "%s needs a value", argv[a.i]);
        } else if ((r = cli_opt(&a, "--tol", &v))) {
            if (r < 0)
                return cli_fail("diff", "--tol needs a value");
            if (n_tols == sizeof tols / sizeof tols[0])
                return cli_fail("diff", "too many --tol rules (at most 64)");
            tols[n_tols++] = v;
        } else if (argv[a.i][0] == '-' && argv[a.i][1] != '\0') {
            return cli_fail("diff", "unknown argument '%s' (see fattn diff --help)", argv[a.i]);
        } else if (!files[0]) {
            files[0] = argv[a.i];
        } else if (!files[1]) {
            files[1] = argv[a.i];
        } else {
            return cli_fail("diff", "unexpected argument '%s': two files are compared",
                            argv[a.i]);
        }
    }
    if (!files[1])
        return cli_fail("diff", "A.h5 and B.h5 are required (see fattn diff --help)");
    fattn_diff_opts o;
    memset(&o, 0, sizeof o);
    o.out = stdout;
    o.only = only;
    o.trust_digests = trust;
    o.audit = audit;
    o.json_path = json;
    if (!mode || !strcmp(mode, "bitwise"))
        o.mode = FATTN_DIFF_BITWISE;
    else if (!strcmp(mode, "ulp"))
        o.mode = FATTN_DIFF_ULP;
    else if (!strcmp(mode, "tol"))
        o.mode = FATTN_DIFF_TOL;
    else
        return cli_fail("diff", "--mode '%s': expected bitwise, ulp or tol", mode);
    if (max_ulp) {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(max_ulp, &end, 10);
        if (errno || end == max_ulp || *end || max_ulp[0] == '-')
            return cli_fail("diff", "--max-ulp '%s': expected a non-negative integer", max_ulp);
        if (o.mode != FATTN_DIFF_ULP)
            return cli_fail("diff", "--max-ulp needs --mode ulp");
        o.max_ulp = (uint64_t)u;
    }
    if ((profile || n_tols) && o.mode != FATTN_DIFF_TOL)
        return cli_fail("diff", "--tol-profile and --tol need --mode tol");
    fattn_tol_profile prof;
    fattn_tol_profile_builtin(&prof);
    if (profile && fattn_tol_profile_load(profile, &prof) != FATTN_OK) {
        fattn_tol_profile_free(&prof);
        return cli_fail("diff", "--tol-profile: %s", fattn_last_error());
    }
    for (size_t i = 0; i < n_tols; i++) {
        if (fattn_tol_profile_add_rule(&prof, tols[i]) != FATTN_OK) {
            fattn_tol_profile_free(&prof);
            return cli_fail("diff", "%s", fattn_last_error());
        }
    }
    o.tol = &prof;
    int rc = fattn_diff_files(files[0], files[1], &o);
    fattn_tol_profile_free(&prof);
    return rc;
}
