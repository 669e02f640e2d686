/* The spec key `cp` (spec.h): TE's context parallelism as a case's
 * configuration. fattn's own runner does not run it (one process); fattn-te
 * runs it in cp_size ranks (docs/te.md, "Context parallelism"). */
#include <string.h>

#include "spec_parse.h"

/* attn_forward_func_with_cp's cp_comm_type values (context_parallel.py
 * 2.20.2:5749-5780) and CPLoadBalancingStrategy's (constants.py:20-21) */
static const char *const comm_names[] = {"p2p", "all_gather", "a2a", "a2a+p2p"};
static const char *const balance_names[] = {"dual_chunk_swap", "no_load_balance"};
#define N_OF(a) (sizeof a / sizeof a[0])

static int name_index(const char *const *names, size_t n, const char *s)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

const char *fh_cp_comm_name(fh_cp_comm c)
{
    return (unsigned)c < N_OF(comm_names) ? comm_names[c] : NULL;
}

fattn_status fh_cp_comm_parse(const char *s, fh_cp_comm *out)
{
    int i = name_index(comm_names, N_OF(comm_names), s);
    if (i < 0)
        return FATTN_E_INVALID_ARG;
    *out = (fh_cp_comm)i;
    return FATTN_OK;
}

const char *fh_cp_balance_name(fh_cp_balance b)
{
    return (unsigned)b < N_OF(balance_names) ? balance_names[b] : NULL;
}

fattn_status fh_cp_balance_parse(const char *s, fh_cp_balance *out)
{
    int i = name_index(balance_names, N_OF(balance_names), s);
    if (i < 0)
        return FATTN_E_INVALID_ARG;
    *out = (fh_cp_balance)i;
    return FATTN_OK;
}

/* cp: null or {"size" (required), "comm", "load_balancing"}. */
fattn_status spec_parse_cp(const spec_parse_ctx *c, const json_t *obj, fh_spec *s)
{
    const json_t *v = json_object_get(obj, "cp"), *x;
    const char *k;
    if (!v || json_is_null(v))
        return FATTN_OK;
    if (!json_is_object(v) || !json_object_get(v, "size"))
        return spec_case_error(c, FATTN_E_PARSE, "cp", "expected null or an object with "
                               "size, got %s", spec_json_type(v));
    json_object_foreach((json_t *)v, k, x) {
        if (strcmp(k, "size") && strcmp(k, "comm") && strcmp(k, "load_balancing"))
            return spec_case_error(c, FATTN_E_PARSE, "cp",
                                   "unknown member '%s' (comm, load_balancing, size)", k);
    }
    const char *comm = NULL, *bal = NULL;
    fattn_status st;
    if ((st = spec_get_int(c, v, "size", 2, FH_SPEC_MAX_CP, &s->cp_size)) != FATTN_OK ||
        (st = spec_get_string(c, v, "comm", &comm)) != FATTN_OK ||
        (st = spec_get_string(c, v, "load_balancing", &bal)) != FATTN_OK)
        return st;
    s->cp_comm = FH_CP_P2P;
    s->cp_balance = FH_CP_DUAL_CHUNK_SWAP;
    if (comm && fh_cp_comm_parse(comm, &s->cp_comm) != FATTN_OK)
        return spec_case_error(c, FATTN_E_PARSE, "cp", "comm '%s' is not p2p, all_gather, "
                               "a2a or a2a+p2p", comm);
    if (bal && fh_cp_balance_parse(bal, &s->cp_balance) != FATTN_OK)
        return spec_case_error(c, FATTN_E_PARSE, "cp", "load_balancing '%s' is not "
                               "dual_chunk_swap or no_load_balance", bal);
    if (s->cp_comm == FH_CP_A2A_P2P && s->cp_size % 2 != 0)
        return spec_case_error(c, FATTN_E_INVALID_ARG, "cp", "a2a+p2p needs an even size (an "
                               "a2a level of 2 ranks times a p2p ring), not %lld",
                               (long long)s->cp_size);
    s->cp = true;
    return FATTN_OK;
}
