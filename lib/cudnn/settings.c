/* The cuDNN engine's settings from the values of the CLI's variables, and
 * their provenance line (fattn/cudnn.h). Plain C: built with or without
 * cuDNN. */
#include <stdio.h>
#include <string.h>

#include "fattn/cudnn.h"

static bool unset(const char *v) { return !v || !*v; }

fattn_status fattn_cudnn_settings_parse(const char *autotune, const char *bwd, const char *det,
                                        const char *det_tag, const char *plan_dir,
                                        const char *cudnn_lib, const char *cudart_lib,
                                        fattn_cudnn_settings *out)
{
    memset(out, 0, sizeof *out);
    if (unset(autotune) || !strcmp(autotune, "0"))
        out->autotune = FATTN_CUDNN_AUTOTUNE_OFF;
    else if (!strcmp(autotune, "1"))
        out->autotune = FATTN_CUDNN_AUTOTUNE_ON;
    else if (!strcmp(autotune, "knobs"))
        out->autotune = FATTN_CUDNN_AUTOTUNE_KNOBS;
    else
        return fattn_error(FATTN_E_INVALID_ARG,
                           "FATTN_CUDNN_AUTOTUNE=%s: expected 0, 1 or knobs", autotune);
    if (!unset(bwd) && strcmp(bwd, "native") != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "FATTN_CUDNN_BWD=%s: expected native or unset",
                           bwd);
    out->bwd_native = !unset(bwd);
    if (!unset(det) && strcmp(det, "ordered") != 0)
        return fattn_error(FATTN_E_INVALID_ARG, "FATTN_CUDNN_DET=%s: expected ordered or unset",
                           det);
    out->det_tag = unset(det_tag) ? NULL : det_tag;
    out->det_ordered = !unset(det) || out->det_tag; /* a pinned tag is the ordered route */
    out->plan_dir = unset(plan_dir) ? NULL : plan_dir;
    out->cudnn_lib = unset(cudnn_lib) ? NULL : cudnn_lib;
    out->cudart_lib = unset(cudart_lib) ? NULL : cudart_lib;
    return FATTN_OK;
}

void fattn_cudnn_settings_describe(const fattn_cudnn_settings *s, char *buf, size_t n)
{
    static const char *const tune[] = {"off", "on", "knobs"};
    fattn_cudnn_settings none;
    memset(&none, 0, sizeof none);
    if (!s)
        s = &none;
    char det[160];
    if (s->det_tag)
        snprintf(det, sizeof det, "tag:%s", s->det_tag);
    else
        snprintf(det, sizeof det, "%s", s->det_ordered ? "ordered" : "direct");
    int k = snprintf(buf, n, "autotune=%s bwd=%s det=%s plan_store=%s",
                     (unsigned)s->autotune < 3 ? tune[s->autotune] : "?",
                     s->bwd_native ? "native" : "switch", det,
                     s->plan_dir && *s->plan_dir ? "on" : "off");
    /* a library named instead of the default search: only then, so the
     * default line stays; no path, as for the plan store (the loaded
     * cuDNN's version is recorded beside) */
    const char *libs[2] = {s->cudnn_lib, s->cudart_lib}, *names[2] = {"cudnn_lib", "cudart_lib"};
    for (int i = 0; i < 2; i++)
        if (!unset(libs[i]) && k >= 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, " %s=named", names[i]);
}
