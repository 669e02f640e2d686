/* A resolved case's features (see features.h). */
#include <stdio.h>

#include "fattn/fp8.h"

#include "case_features.h"

static const char *const names[FH_FEATURE_COUNT] = {
#define FH_FEATURE_NAME(name) #name,
    FH_FEATURES(FH_FEATURE_NAME)
#undef FH_FEATURE_NAME
};

const char *fh_feature_name(fh_feature f)
{
    return f >= 0 && f < FH_FEATURE_COUNT ? names[f] : "?";
}

static const char *yes(bool b)
{
    return b ? "yes" : "no";
}

void fh_case_features_of(const fh_case *c, fh_case_features *out)
{
    const fh_spec *s = c->spec;
    char(*v)[FH_FEATURE_LEN] = out->v;
    const size_t n = FH_FEATURE_LEN;
    long long l = (long long)c->window[0], r = (long long)c->window[1];
    bool sliding = !(l == -1 && (r == -1 || r == 0));
    if (sliding)
        snprintf(v[FH_FEATURE_mask], n, "%s+window(%lld,%lld)", fattn_mask_type_name(s->mask),
                 l, r);
    else
        snprintf(v[FH_FEATURE_mask], n, "%s", fattn_mask_type_name(s->mask));
    snprintf(v[FH_FEATURE_window], n, "(%lld,%lld)", l, r);
    snprintf(v[FH_FEATURE_training], n, "%s", yes(s->is_training));
    snprintf(v[FH_FEATURE_layout], n, "%s", fattn_layout_name(s->layout));
    snprintf(v[FH_FEATURE_layout_group], n, "%s", fattn_layout_group_name(c->layout_group));
    snprintf(v[FH_FEATURE_q_format], n, "%s", fattn_format_name(c->q_format));
    snprintf(v[FH_FEATURE_dtype], n, "%s", fattn_dtype_name(s->dtype));
    snprintf(v[FH_FEATURE_bias], n, "%s", fattn_bias_type_name(s->bias));
    snprintf(v[FH_FEATURE_softmax], n, "%s", fattn_softmax_type_name(s->softmax));
    snprintf(v[FH_FEATURE_fp8], n, "%s", s->fp8 ? fattn_fp8_recipe_name(s->fp8_recipe) : "none");
    snprintf(v[FH_FEATURE_fp8_input], n, "%s", yes(s->fp8 && s->fp8_input));
    snprintf(v[FH_FEATURE_fp8_output], n, "%s", yes(s->fp8 && s->fp8_output));
    snprintf(v[FH_FEATURE_dropout], n, "%s", yes(c->dropout_p > 0.0f));
    snprintf(v[FH_FEATURE_heads], n, "%s",
             s->hg == s->h ? "mha" : s->hg == 1 ? "mqa" : "gqa");
    snprintf(v[FH_FEATURE_head_dims], n, "%s", s->d_qk == s->d_v ? "equal" : "unequal");
    snprintf(v[FH_FEATURE_lengths], n, "%s",
             s->sq == s->skv ? "sq=skv" : s->sq < s->skv ? "sq<skv" : "sq>skv");
    snprintf(v[FH_FEATURE_padding], n, "%s", yes(c->padding));
    snprintf(v[FH_FEATURE_max_logit], n, "%s", yes(s->return_max_logit));
    snprintf(v[FH_FEATURE_deterministic], n, "%s", yes(s->deterministic));
    snprintf(v[FH_FEATURE_paged], n, "%s", yes(s->paged));
    snprintf(v[FH_FEATURE_raw_func_args], n, "%s", yes(s->raw_func_args));
    snprintf(v[FH_FEATURE_grad_mode], n, "%s",
             s->inference_mode ? "inference_mode" : s->no_grad ? "no_grad" : "grad");
    snprintf(v[FH_FEATURE_max_batch_size], n, "%s", yes(s->max_batch_size != 0));
}
