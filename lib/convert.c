/*
 * convert.c - the scalar conversions of the numerics contract
 * (doc/numerics.md, "Conversion of the result"):
 *
 *   smm_f32_to_f16   binary32 -> binary16 bits
 *   smm_f32_to_bf16  binary32 -> bfloat16 bits
 *   smm_f16_to_f32   binary16 bits -> binary32 (exact)
 *   smm_bf16_to_f32  bfloat16 bits -> binary32 (exact)
 *
 * Narrowing rounds to nearest, ties to even; subnormal results are kept;
 * overflow gives +-Inf as IEEE-754 says; any NaN gives the canonical NaN
 * 0x7FFF (sign and payload dropped, as NVIDIA GPUs write it); zeros keep
 * their sign. Widening is exact, subnormals included, and keeps NaN
 * payloads (the quiet bit is not forced).
 *
 * Everything is integer arithmetic on the bit patterns, so the results do
 * not depend on the caller's floating-point environment (rounding mode,
 * FTZ, DAZ) and no _Float16 or F16C support is needed. Every backend that
 * converts in another way (F16C, GPU intrinsics) must agree with these
 * functions bit for bit.
 */
#include "internal.h"

#include <string.h>

/* The bits of a binary32 and back, without aliasing tricks. */
static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/*
 * Shifts `mant` right by `shift` bits (1 <= shift <= 31) and rounds the
 * result to nearest, ties to even, looking at the bits shifted out.
 */
static uint32_t shift_right_rne(uint32_t mant, unsigned shift)
{
    uint32_t kept = mant >> shift;
    uint32_t rest = mant & ((UINT32_C(1) << shift) - 1u);
    uint32_t half = UINT32_C(1) << (shift - 1u);

    if (rest > half || (rest == half && (kept & 1u)))
        kept += 1u;
    return kept;
}

/*
 * binary32 -> binary16.
 *
 * binary32: 1 sign, 8 exponent (bias 127), 23 mantissa bits.
 * binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest finite
 * 65504 = 0x7BFF, smallest normal 2^-14 = 0x0400, smallest subnormal
 * 2^-24 = 0x0001.
 */
SMM_API uint16_t smm_f32_to_f16(float x)
{
    const uint32_t u = f32_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t mag = u & 0x7FFFFFFFu;        /* |x| as bits */
    const uint32_t exp32 = mag >> 23;             /* biased, 0..255 */
    const uint32_t mant32 = mag & 0x007FFFFFu;

    /* NaN: canonical, whatever the sign and payload. */
    if (mag > 0x7F800000u)
        return 0x7FFFu;

    /*
     * Overflow: |x| >= 65520 = 0x477FF000 is at or above the midpoint
     * between 65504 (the largest finite binary16) and 65536 (what the next
     * binary16 value would be), so it rounds to Inf; +-Inf lands here too.
     */
    if (mag >= 0x477FF000u)
        return (uint16_t)(sign | 0x7C00u);

    /*
     * Normal result: |x| >= 2^-14 (0x38800000). Rebias the exponent
     * (127 -> 15) and drop 13 mantissa bits with rounding. Exponent and
     * mantissa are adjacent in the encoding, so a rounding carry out of the
     * mantissa correctly bumps the exponent (2047.5 rounds to 2048). Since
     * |x| < 65520, the result is at most 0x7BFF.
     */
    if (mag >= 0x38800000u) {
        uint32_t h = ((exp32 - 127u + 15u) << 10) | (mant32 >> 13);
        uint32_t rest = mant32 & 0x1FFFu;         /* the 13 dropped bits */
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h += 1u;
        return (uint16_t)(sign | h);
    }

    /*
     * Subnormal (or zero) result: |x| < 2^-14. The result is
     * round(|x| / 2^-24) in units of the smallest subnormal. A normal
     * binary32 is (2^23 + mant32) * 2^(exp32 - 150), so that quotient is
     * (2^23 + mant32) * 2^(exp32 - 126): a right shift by 126 - exp32
     * (>= 14 here). If the shift exceeds 24, |x| < 2^-25 (half the smallest
     * subnormal) and the result is zero; binary32 subnormals and zeros
     * (exp32 == 0) are far below that. Rounding up from 0x03FF gives 0x0400,
     * the smallest normal, which is the correct encoding.
     */
    if (exp32 < 102u)
        return sign;
    return (uint16_t)(sign | shift_right_rne(0x00800000u | mant32, 126u - exp32));
}

/*
 * binary32 -> bfloat16: bfloat16 is the upper half of a binary32, so the
 * lower 16 bits are dropped with rounding to nearest even. A carry out of
 * the mantissa bumps the exponent; from the largest finite bfloat16
 * exponent it gives exactly the Inf pattern (0x7F80 / 0xFF80), which is
 * IEEE overflow. Subnormals round the same way as normals.
 */
SMM_API uint16_t smm_f32_to_bf16(float x)
{
    const uint32_t u = f32_bits(x);
    uint32_t upper = u >> 16;
    const uint32_t lower = u & 0xFFFFu;

    if ((u & 0x7FFFFFFFu) > 0x7F800000u)   /* NaN: canonical */
        return 0x7FFFu;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
        upper += 1u;                        /* +-Inf: lower == 0, unchanged */
    return (uint16_t)upper;
}

/*
 * binary16 -> binary32, exact. Normals rebias the exponent (15 -> 127);
 * Inf and NaN keep their mantissa (NaN payload shifted into place);
 * subnormals (h = m * 2^-24, 0 < m < 1024) are normalised by shifting m
 * left until its leading one reaches bit 10.
 */
SMM_API float smm_f16_to_f32(uint16_t h)
{
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    const uint32_t exp16 = ((uint32_t)h >> 10) & 0x1Fu;
    uint32_t mant = (uint32_t)h & 0x03FFu;

    if (exp16 == 0x1Fu)                                 /* Inf or NaN */
        return f32_from_bits(sign | 0x7F800000u | (mant << 13));
    if (exp16 != 0u)                                    /* normal */
        return f32_from_bits(sign | ((exp16 - 15u + 127u) << 23) | (mant << 13));
    if (mant == 0u)                                     /* +-0 */
        return f32_from_bits(sign);

    /* Subnormal: value = mant * 2^-24 = 1.f * 2^e with e = -14 - shifts. */
    {
        int32_t e = -14;
        while ((mant & 0x0400u) == 0u) {
            mant <<= 1;
            e -= 1;
        }
        mant &= 0x03FFu;                                /* drop the leading one */
        return f32_from_bits(sign | ((uint32_t)(e + 127) << 23) | (mant << 13));
    }
}

/* bfloat16 -> binary32, exact: the bits are the upper half. */
SMM_API float smm_bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}
