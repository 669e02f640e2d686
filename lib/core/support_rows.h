/* The support table's evaluation over any rows (not installed,
 * lib/core/support_rows.c): what fattn_support_check, _check_engine,
 * fattn_support_routed and fattn_support_route_note do with
 * lib/core/support.c's tables, and for tables a test makes up — the real
 * tables have no row that only one release has, yet how such a row is
 * reported must be tested. */
#ifndef FATTN_CORE_SUPPORT_ROWS_H
#define FATTN_CORE_SUPPORT_ROWS_H

#include <stddef.h>

#include "fattn/support.h"

fattn_status fattn__support_check_rows(const fattn_support_rule *rows, size_t n,
                                      const fattn_support_query *q, unsigned engine,
                                      const fattn_support_rule **failed);
/* The engine's own gaps among rows (fattn_support_check_engine). */
fattn_status fattn__support_check_engine_rows(const fattn_support_rule *rows, size_t n,
                                             const fattn_support_query *q, unsigned engine,
                                             const fattn_support_rule **failed);
int fattn__support_routed_rows(const fattn_support_rule *rows, size_t n,
                              const fattn_support_query *q, const fattn_support_rule **out,
                              int max);
void fattn__support_note_rows(const fattn_support_rule *refusals, size_t nr,
                             const fattn_support_rule *routing, size_t nt,
                             const fattn_support_query *q, char *buf, size_t n);

#endif /* FATTN_CORE_SUPPORT_ROWS_H */
