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
 * fattn__cpu_logf: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), s = (m-1)/(m+1),
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
    /* 2^k from the bits of kd + shifter (= 1.5*2^52 + k exactly, so its low
     * bits hold k and ((bits + 1023) << 52) is the biased exponent k + 1023;
     * the shifter's own bits vanish in the shift). Same value as building it
     * from (int64_t)kd, but without a double -> int64 conversion, which SSE2
     * cannot vectorise. */
    uint64_t kbits = fattn_cpu_f64_bits(kd + shifter);
    double two_k = fattn_cpu_f64_from_bits((kbits + 1023) << 52);
    float res = (float)(p * two_k);
    return is_nan ? xf : res;
}

float fattn__cpu_logf(float x);

static inline uint32_t fattn_cpu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fattn_cpu_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Branch-free (vectorisable) equivalents of fattn_round_f32 for bfloat16 and
 * float16 and of the float16 -> float32 widening; bit for bit the same as
 * lib/core/dtype.c for every input (checked over all 2^32 / 2^16 patterns). */
static inline float fattn_cpu_round_bf16(float f)
{
    uint32_t u = fattn_cpu_f32_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t rn = (u & 0xffff0000u) | 0x00400000u;
    return fattn_cpu_f32_from_bits((u & 0x7fffffffu) > 0x7f800000u ? rn : r);
}

static inline float fattn_cpu_round_f16(float f)
{
    uint32_t u = fattn_cpu_f32_bits(f);
    uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
    /* normal float16 range: round the mantissa to 10 bits, ties to even */
    uint32_t rnorm = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
    rnorm = rnorm >= 0x47800000u ? 0x7f800000u : rnorm;
    /* subnormal range: multiples of 2^-24, the ulp of floats in [0.5, 1) */
    float af = fattn_cpu_f32_from_bits(a);
    uint32_t rsub = fattn_cpu_f32_bits((af + 0.5f) - 0.5f);
    uint32_t r = a < 0x38800000u ? rsub : rnorm;
    uint32_t rn = (u & 0xffffe000u) | 0x00400000u;
    return fattn_cpu_f32_from_bits(a > 0x7f800000u ? rn : (sign | r));
}

static inline float fattn_cpu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t rnorm = ((e + 112u) << 23) | (m << 13);
    uint32_t rinf = 0x7f800000u | (m << 13);
    uint32_t rsub = fattn_cpu_f32_bits((float)(int32_t)m * 0x1p-24f);
    uint32_t r = e == 0x1fu ? rinf : (e == 0 ? rsub : rnorm);
    return fattn_cpu_f32_from_bits(sign | r);
}

#endif /* FATTN_CPU_FMATH_H */
