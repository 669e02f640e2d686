/* harness/model/te_rules.h — a case under one TE release's support rules: the
 * query DotProductAttention would see for it, and the note that says which
 * of the table's routing rules (fattn/support.h) it trips, for `fattn
 * cases`, the run file (prov_te_route, docs/run-files.md) and verify. */
#ifndef FH_HARNESS_TE_RULES_H
#define FH_HARNESS_TE_RULES_H

#include <stddef.h>

#include "fattn/support.h"

#include "spec.h"

/* Room for any note the table can make. */
#define FH_TE_NOTE_MAX 1024

/* The support query of `s` under release bit `te_rules` (0: the newest):
 * the resolved window, the batch size, the bias tensor's shape, the
 * determinism, and a bias that needs dBias (training with a bias tensor
 * that requires grad: all but the spec's bias_no_grad; FusedAttnFunc's
 * backward computes dBias either way, DotProductAttention's routing reads
 * the tensor's requires_grad). */
fattn_status fh_case_support_query(const fh_spec *s, unsigned te_rules,
                                      fattn_support_query *q);
/* fattn_support_route_note of that query into buf: "" when nothing
 * applies, and for a spec that does not resolve (an invalid window) or that
 * the selected release's refusal rows refuse as TE-invalid or unsafe (it
 * never reaches a backend choice). FATTN_E_INVALID_ARG for n == 0. */
fattn_status fh_case_te_note(const fh_spec *s, unsigned te_rules, char *buf, size_t n);

#endif /* FH_HARNESS_TE_RULES_H */
