/* Portable exp and log for the CPU engine.
 *
 * glibc's expf/logf pick an implementation at run time (FMA or not) and may
 * differ in the last bit across machines; the CPU engine promises the same
 * bits everywhere, so it carries its own. Both work in double precision
 * using only IEEE-754 basic operations (add, sub, mul, div, conversions),
 * which every conforming machine rounds identically, then round once to
 * float. -ffp-contract=off keeps the compiler from fusing them.
 *
 * fattn_cpu_expf: x = k*ln2 + r with k = nearest integer to x*log2(e)
 *   (ties to even, by the 1.5*2^52 trick), r computed with a two-part ln2
 *   (hi has 32 significant bits, so k*hi is exact for |k| < 2^20);
 *   |r| <= 0.3466; exp(r) by its Taylor series to degree 11 in Horner form
 *   (truncation < 2.4e-14 relative); times 2^k built from the exponent bits.
 *   Inputs are clamped to [-104, 89] first (results 0 / inf after the final
 *   rounding to float, exactly as the true values would round); NaN -> NaN.
 * fattn_cpu_logf: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), s = (m-1)/(m+1),
 *   log(m) = 2*atanh(s) by its odd series to s^21 (|s| <= 0.1716, truncation
 *   < 1e-17), plus e*ln2. Subnormals are scaled by 2^64 first. log(0) = -inf,
 *   log(x<0) = NaN, log(inf) = inf, log(NaN) = NaN.
 * Accuracy: within 1 ulp of the true value (measured over all floats in
 * tests/test_fmath.c against double libm); what matters is that the bits are
 * the same on every machine.
 */
#ifndef FATTN_CPU_FMATH_H
#define FATTN_CPU_FMATH_H

#include <stdint.h>
#include <string.h>

static inline double fattn_cpu_f64_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline uint64_t fattn_cpu_f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* Written branch-free (selects only) so that loops calling it vectorise. */
static inline float fattn_cpu_expf(float xf)
{
    const double log2e = 1.4426950408889634074;
    const double ln2_hi = 0x1.62e42feep-1;      /* 32 significant bits */
    const double ln2_lo = 0x1.a39ef35793c76p-33; /* ln2 - ln2_hi */
    const double shifter = 0x1.8p52;
    double x = (double)xf;
    int is_nan = xf != xf;
    x = is_nan ? 0.0 : x;
    x = x > 89.0 ? 89.0 : x;
    x = x < -104.0 ? -104.0 : x;
    double kd = (x * log2e + shifter) - shifter;
    double r = (x - kd * ln2_hi) - kd * ln2_lo;
    double p = 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t k = (int64_t)kd;
    double two_k = fattn_cpu_f64_from_bits((uint64_t)(k + 1023) << 52);
    float res = (float)(p * two_k);
    return is_nan ? xf : res;
}

float fattn_cpu_logf(float x);

#endif /* FATTN_CPU_FMATH_H */
