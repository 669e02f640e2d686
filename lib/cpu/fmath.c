/* The CPU engine's log (exp is inline in fmath.h so that loops vectorise). */
#include <math.h>

#include "cpu/fmath.h"

float fattn__cpu_logf(float xf)
{
    if (xf != xf)
        return xf;
    if (xf < 0.0f)
        return NAN;
    if (xf == 0.0f)
        return -INFINITY;
    if (xf == INFINITY)
        return xf;
    const double ln2 = 0.69314718055994530942;
    const double sqrt_half = 0.70710678118654752440;
    double x = (double)xf;
    int e_adj = 0;
    if (xf < 0x1p-126f) { /* subnormal: bring into the normal range */
        x *= 0x1p64;
        e_adj = -64;
    }
    uint64_t u = fattn_cpu_f64_bits(x);
    int e = (int)((u >> 52) & 0x7ff) - 1023;
    double m = fattn_cpu_f64_from_bits((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
    /* m is in [1, 2); fold [sqrt(2), 2) down so that |s| <= 0.1716. */
    if (m >= 2.0 * sqrt_half) {
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double p = 1.0 / 21.0;
    p = p * s2 + 1.0 / 19.0;
    p = p * s2 + 1.0 / 17.0;
    p = p * s2 + 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0;
    p = p * s2 + 1.0 / 11.0;
    p = p * s2 + 1.0 / 9.0;
    p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0;
    p = p * s2 + 1.0 / 3.0;
    p = p * s2 + 1.0;
    double logm = 2.0 * s * p;
    return (float)((double)(e + e_adj) * ln2 + logm);
}
