/* harness/check/elemcmp.h — the element comparators of every tree comparison
 * (`fattn diff`, verify, the --repeat audit): two buffers of one dtype,
 * element by element, into statistics.
 *
 * Rules (B is the reference; a float element is decoded from its own bit
 * pattern, integers compare exactly in every rule):
 *  - BITWISE: every stored bit counts (NaN payloads, +0 vs -0);
 *  - ULP:     a float element passes within max_ulp on its format's lattice;
 *             NaN equals NaN (any payload), +0 equals -0, a class change
 *             (finite / +inf / -inf / NaN) fails;
 *  - TOL:     a float element passes if |a-b| <= atol + rtol*|b|, with the
 *             ULP rule's NaN, zero and class handling;
 *  - NOISY:   for tensors that are non-deterministic by construction: every
 *             element (equal bits included) must satisfy
 *             |a-b| <= atol + rtol*|b| as float values; NaN or inf anywhere
 *             fails (the comparison is false for them). Only bit_count and
 *             fail_count are kept.
 */
#ifndef FH_HARNESS_ELEMCMP_H
#define FH_HARNESS_ELEMCMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "tolerance.h"

typedef enum fh_elem_mode {
    FH_ELEM_BITWISE = 0,
    FH_ELEM_ULP,
    FH_ELEM_TOL,
    FH_ELEM_NOISY
} fh_elem_mode;

/* The worst elements kept per dataset. */
#define FH_ELEM_WORST 5

/* Squares of every 16- and 8-bit pattern per dtype (0 for non-finite), built
 * on first use for the signal energy of equal chunks. Owned by the caller of
 * a comparison: zero-initialise, then fh_elem_sq_cache_free. */
typedef struct fh_elem_sq_cache {
    double *tab[FATTN_DTYPE_COUNT];
} fh_elem_sq_cache;

void fh_elem_sq_cache_free(fh_elem_sq_cache *c);

typedef struct fh_elem_cmp {
    fh_elem_mode mode;
    uint64_t max_ulp;          /* ULP */
    fh_tol tol;                /* TOL, NOISY */
    bool skip_poison_b;        /* elements whose B bytes are all 0xFF are
                                  undefined (a CPU golden's poison): skipped */
    fh_elem_sq_cache *sq;      /* energy tables; NULL: energy of 8/16-bit
                                  equal chunks is not accumulated (NaN) */
} fh_elem_cmp;

typedef struct fh_elem_worst {
    uint64_t index;            /* flat, C order */
    uint64_t a_bits, b_bits;
    double a, b;
    uint64_t score;            /* ranking: class change > ulp (float) or |a-b| (int) */
    uint64_t ulp;
    bool has_ulp;
} fh_elem_worst;

typedef struct fh_elem_stats {
    uint64_t numel;            /* set by the caller */
    uint64_t bit_count;        /* elements whose bits differ */
    uint64_t fail_count;       /* elements that fail the rule */
    uint64_t hist[6];          /* ulp 0, 1, 2-4, 5-16, 17-256, >256 (same sign) */
    uint64_t sign_flips, class_changes, nan_payloads;
    uint64_t max_ulp;
    double max_abs, max_rel, sse, signal;
    uint64_t n_finite;
    bool signal_partial;       /* equal chunks skipped before a difference showed */
    fh_elem_worst worst[FH_ELEM_WORST];
    int n_worst;
    /* TOL: the failing element that exceeds its bound by the most (the
     * first of equals; a class change exceeds by +inf) */
    uint64_t excess_index;
    double excess;
} fh_elem_stats;

/* ULP distance of two bit patterns of a float dtype on that format's own
 * lattice: sign-magnitude mapped monotonically onto the integers (+0 and -0
 * both map to 0). Meaningless for NaN. */
uint64_t fh_elem_ulp(fattn_dtype dtype, uint64_t a_bits, uint64_t b_bits);

/* The element at p (esize bytes, little-endian) as an unsigned integer. */
uint64_t fh_elem_bits(const unsigned char *p, size_t esize);
/* A bit pattern of dtype t as a double (exact for every dtype but int64
 * beyond 2^53). */
double fh_elem_decode(fattn_dtype t, uint64_t bits);

/* Compare one chunk of n elements of a dataset pair, starting at flat
 * element `base`, into *s. *want_signal: accumulate the energy of B (for
 * NMSE) over equal chunks too; it is switched on, and s->signal_partial
 * set, when a float chunk differs after equal chunks were skipped. A chunk
 * whose bytes are equal only adds to the energy and the finite count.
 * NOISY is a rule over a whole dataset: pass it as one chunk. */
void fh_elem_compare_chunk(const fh_elem_cmp *c, fattn_dtype t, const unsigned char *a,
                              const unsigned char *b, size_t n, uint64_t base,
                              bool *want_signal, fh_elem_stats *s);

#endif /* FH_HARNESS_ELEMCMP_H */
