/* A case under one TE release's support rules (te_rules.h). */
#include <string.h>

#include "case.h"
#include "te_rules.h"

fattn_status fh_case_support_query(const fh_spec *s, unsigned te_rules,
                                      fattn_support_query *q)
{
    fh_case c;
    fattn_status st = fh_case_resolve(s, &c);
    if (st != FATTN_OK)
        return st;
    fattn_support_query_init(q);
    q->te_rules = te_rules ? te_rules : FATTN_TE_RULES_NEWEST;
    q->q_dtype = q->kv_dtype = s->dtype;
    q->has_bias_tensor = c.t.attn_bias.present;
    q->bias_dtype = c.t.attn_bias.present ? c.t.attn_bias.dtype : FATTN_DTYPE_INVALID;
    for (int i = 0; i < 3 && c.t.attn_bias.present; i++)
        q->bias_shape[i] = c.t.attn_bias.shape[i];
    q->layout = s->layout;
    q->bias_type = s->bias;
    q->mask_type = s->mask;
    q->softmax_type = s->softmax;
    q->dropout = c.dropout_p;
    q->b = s->b, q->h = s->h, q->hg = s->hg, q->sq = s->sq, q->skv = s->skv;
    q->d_qk = s->d_qk, q->d_v = s->d_v;
    q->window_left = c.window[0], q->window_right = c.window[1];
    q->direct_call = s->raw_func_args;
    q->is_training = s->is_training;
    q->return_max_logit = s->return_max_logit;
    q->deterministic = s->deterministic;
    q->bias_requires_grad = s->is_training && c.t.attn_bias.present && !s->bias_no_grad;
    fh_case_free(&c);
    return FATTN_OK;
}

fattn_status fh_case_te_note(const fh_spec *s, unsigned te_rules, char *buf, size_t n)
{
    if (n == 0)
        return fattn_error(FATTN_E_INVALID_ARG, "fh_case_te_note: empty buffer");
    buf[0] = '\0';
    fattn_support_query q;
    /* One that does not resolve, or that the selected rules refuse, never
     * reaches a backend choice: no note. */
    if (fh_case_support_query(s, te_rules, &q) != FATTN_OK)
        return FATTN_OK;
    fattn_status valid = fattn_support_check(&q, FATTN_SUPPORT_ENGINE_CPU, NULL);
    if (valid == FATTN_E_INVALID_CASE || valid == FATTN_E_UNSAFE_TE_QUIRK)
        return FATTN_OK;
    fattn_support_route_note(&q, buf, n);
    return FATTN_OK;
}
