/* harness/model/case_mem.h — what running a case holds in memory, from its
 * spec alone.
 *
 * The one estimate of a case's tensors, for every command that makes them
 * (run, replay, verify, golden): each checks its sum of these against
 * --max-memory before it allocates anything. Generous, never exact: every
 * tensor the case has counted in the shapes the case makes it (a paged
 * case's K and V as their page containers [num_pages, page_size, hg, d]
 * beside the flat ones they are made from, its page tables; FP8 copies and
 * their dequantised twins; the bias at its largest shape), held both by
 * the front end and by the recorded tree, and the engine's scratch; a
 * schedule's every forward step (its states recorded, its ctx alive). A
 * double: no spec the parser accepts overflows it. */
#ifndef FH_HARNESS_CASE_MEM_H
#define FH_HARNESS_CASE_MEM_H

#include "spec.h"

typedef struct fh_case_mem {
    double tree; /* one run's recorded tree: every tensor of every state */
    double peak; /* one run at its height: that tree, the front end's and
                    inputs' buffers, the engine's scratch */
} fh_case_mem;

void fh_case_memory(const fh_spec *s, fh_case_mem *m);

#endif /* FH_HARNESS_CASE_MEM_H */
